"""``inspect`` always reports counts, even for a session the replay must refuse (#22): for every
format, a session written from that format whose rebuilt request llama-server refuses — two
assistant messages at the end, tool arguments that are not JSON, a part the server cannot take
a tool that is not a function — gets its counts and the reason in text, ``--json`` and ``--markdown``,
while ``replay`` refuses it with that same reason (one line, exit 2)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from replayer.cli import main

END = "cannot have 2 or more assistant messages at the end of the list"
ARGS = "failed to parse tool call arguments as JSON"
TOOL = "unsupported tool {\"type\":\"retrieval\"}"
T = "2026-12-02T10:00:00.000Z"


def _jsonl(path: Path, records: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _call(args: str) -> dict:
    return {"role": "assistant", "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "bash", "arguments": args}}]}


def openai_end(d: Path) -> Path:
    (d / "body.json").write_text(json.dumps({"messages": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}]}))
    return d / "body.json"


def openai_args(d: Path) -> Path:
    (d / "body.json").write_text(json.dumps({"messages": [
        {"role": "user", "content": "hi"}, _call("not json{"), {"role": "tool", "tool_call_id": "c1", "content": "r"},
        {"role": "user", "content": "next"}]}))
    return d / "body.json"


def chat_requests_args(d: Path) -> Path:
    first = [{"role": "user", "content": "hi"}]
    return _jsonl(d / "requests.jsonl", [{"messages": first}, {"messages": first + [
        _call("not json{"), {"role": "tool", "tool_call_id": "c1", "content": "r"}]}])


def traffic_log_args(d: Path) -> Path:
    first = [{"role": "user", "content": "hi"}]
    bodies = [{"messages": first}, {"messages": first + [_call("not json{"),
                                                         {"role": "tool", "tool_call_id": "c1", "content": "r"}]}]
    return _jsonl(d / "traffic.jsonl", [
        {"v": 1, "seq": k, "endpoint": "/v1/chat/completions", "body": b, "body_sha256": "0" * 64, "status": 200}
        for k, b in enumerate(bodies)])


def sharegpt_end(d: Path) -> Path:
    (d / "sharegpt.json").write_text(json.dumps([{"conversations": [
        {"from": "human", "value": "hi"}, {"from": "gpt", "value": "a"}, {"from": "gpt", "value": "b"}]}]))
    return d / "sharegpt.json"


def webui_end(d: Path) -> Path:
    nodes = [{"id": "r", "convId": "c", "type": "root", "timestamp": 1, "role": "system", "content": "", "parent": None,
              "children": ["u"]},
             {"id": "u", "convId": "c", "type": "text", "timestamp": 2, "role": "user", "content": "hi", "parent": "r",
              "children": ["a1"]},
             {"id": "a1", "convId": "c", "type": "text", "timestamp": 3, "role": "assistant", "content": "a",
              "parent": "u", "children": ["a2"]},
             {"id": "a2", "convId": "c", "type": "text", "timestamp": 4, "role": "assistant", "content": "b",
              "parent": "a1", "children": []}]
    (d / "conv.json").write_text(json.dumps({"conv": {"id": "c", "name": "n", "lastModified": 5, "currNode": "a2"},
                                             "messages": nodes}))
    return d / "conv.json"


def codex_args(d: Path) -> Path:
    def item(payload):
        return {"timestamp": T, "type": "response_item", "payload": payload}

    return _jsonl(d / "rollout-2026-12-02T10-00-00-x.jsonl", [
        {"timestamp": T, "type": "session_meta", "payload": {"id": "x", "timestamp": T, "cwd": "/p",
                                                             "cli_version": "0.158.0"}},
        item({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}),
        item({"type": "function_call", "name": "shell", "arguments": "not json{", "call_id": "c1"}),
        item({"type": "function_call_output", "call_id": "c1", "output": "r"}),
        item({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "next"}]})])


def _cc(uuid, parent, kind, content, msg_id=None):
    r = {"uuid": uuid, "parentUuid": parent, "sessionId": "s1", "type": kind, "timestamp": T, "cwd": "/p",
         "version": "1.0.98", "isSidechain": False, "userType": "external"}
    r["message"] = {"role": kind, "content": content} | ({"id": msg_id, "model": "m"} if msg_id else {})
    return r


def claude_code_end(d: Path) -> Path:
    return _jsonl(d / "s1.jsonl", [_cc("u1", None, "user", "hi"),
                                   _cc("a1", "u1", "assistant", [{"type": "text", "text": "a"}], "m1"),
                                   _cc("a2", "a1", "assistant", [{"type": "text", "text": "b"}], "m2")])


def qwen_code_end(d: Path) -> Path:
    def rec(uuid, parent, kind, message):
        return {"uuid": uuid, "parentUuid": parent, "sessionId": "s1", "timestamp": T, "type": kind, "cwd": "/p",
                "version": "0.24.4", "message": message}

    return _jsonl(d / "chat.jsonl", [rec("u1", None, "user", {"role": "user", "parts": [{"text": "hi"}]}),
                                     rec("a1", "u1", "assistant", {"role": "model", "parts": [{"text": "a"}]}),
                                     rec("a2", "a1", "assistant", {"role": "model", "parts": [{"text": "b"}]})])


def continue_end(d: Path) -> Path:
    def item(role, text):
        return {"message": {"role": role, "content": text}, "contextItems": []}

    f = d / "0b7c9e2e-1111-4222-8333-444455556666.json"
    f.write_text(json.dumps({"sessionId": "0b7c9e2e", "title": "t", "workspaceDirectory": "/p",
                             "history": [item("user", "hi"), item("assistant", "a"), item("assistant", "b")]}))
    return f


def pi_end(d: Path) -> Path:
    def msg(i, parent, role, content, **kw):
        return {"type": "message", "id": f"{i:08x}", "parentId": parent and f"{parent:08x}", "timestamp": T,
                "message": {"role": role, "content": content, "timestamp": 1, **kw}}

    asst = {"api": "openai-completions", "provider": "p", "model": "m", "stopReason": "stop",
            "usage": {"input": 1, "output": 1}}
    return _jsonl(d / "2026-12-02T10-00-00-000Z_x.jsonl", [
        {"type": "session", "version": 3, "id": "x", "timestamp": T, "cwd": "/p"},
        msg(1, None, "user", [{"type": "text", "text": "hi"}]),
        msg(2, 1, "assistant", [{"type": "text", "text": "a"}], **asst),
        msg(3, 2, "assistant", [{"type": "text", "text": "b"}], **asst)])


def cline_end(d: Path) -> Path:
    task = d / "tasks" / "1700000000000"
    task.mkdir(parents=True)
    (task / "api_conversation_history.json").write_text(json.dumps([
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "bash", "input": {"c": "ls"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "a.txt"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "a"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "b"}]}]))
    return task / "api_conversation_history.json"


def _opencode_msgs():
    """A user prompt and one assistant message of two steps, each only text: two assistant
    messages at the end."""
    return [("msg_1", {"role": "user", "time": {"created": 1}}, [("prt_1", {"type": "text", "text": "hi"})]),
            ("msg_2", {"role": "assistant", "modelID": "m", "providerID": "p", "time": {"created": 2}},
             [("prt_2", {"type": "step-start"}), ("prt_3", {"type": "text", "text": "a"}),
              ("prt_4", {"type": "step-start"}), ("prt_5", {"type": "text", "text": "b"})])]


def opencode_db_end(d: Path) -> Path:
    con = sqlite3.connect(d / "opencode.db")
    con.executescript("""
        create table session (id text primary key, parent_id text, title text, directory text, version text,
                              time_created integer, time_updated integer);
        create table message (id text primary key, session_id text, time_created integer, time_updated integer,
                              data text);
        create table part (id text primary key, message_id text, session_id text, time_created integer,
                           time_updated integer, data text);""")
    con.execute("insert into session values ('ses_x', NULL, 't', '/p', '1.18.33', 1, 2)")
    for mid, data, parts in _opencode_msgs():
        con.execute("insert into message values (?,?,?,?,?)", (mid, "ses_x", 1, 1, json.dumps(data)))
        for pid, p in parts:
            con.execute("insert into part values (?,?,?,?,?,?)", (pid, mid, "ses_x", 0, 0, json.dumps(p)))
    con.commit()
    con.close()
    return d / "opencode.db"


def kilo_db_end(d: Path) -> Path:
    """OpenCode's tables and one of Kilo's: a Kilo database, its end as OpenCode's."""
    db = opencode_db_end(d).rename(d / "kilo.db")
    con = sqlite3.connect(db)
    con.execute("create table kilo_board (root_session_id text primary key)")
    con.commit()
    con.close()
    return db


def crush_end(d: Path) -> Path:
    """Crush's tables (its migrations' columns that the importer reads), two replies at the end."""
    con = sqlite3.connect(d / "crush.db")
    con.executescript("""
        create table sessions (id text primary key, parent_session_id text, title text, updated_at integer,
                               created_at integer, summary_message_id text);
        create table messages (id text primary key, session_id text, role text, parts text, model text,
                               provider text, created_at integer, updated_at integer);
        create table files (id text primary key);""")
    con.execute("insert into sessions values ('s', NULL, 't', 2, 1, NULL)")
    for k, (role, text) in enumerate([("user", "hi"), ("assistant", "a"), ("assistant", "b")]):
        con.execute("insert into messages values (?, 's', ?, ?, 'm', 'p', ?, ?)",
                    (f"m{k}", role, json.dumps([{"type": "text", "data": {"text": text}}]), k + 1, k + 1))
    con.commit()
    con.close()
    return d / "crush.db"


def goose_end(d: Path) -> Path:
    """Goose's tables (the columns the importer reads), two replies at the end."""
    con = sqlite3.connect(d / "sessions.db")
    con.executescript("""
        create table schema_version (version integer primary key);
        create table sessions (id text primary key, name text, working_dir text, updated_at text);
        create table messages (id integer primary key autoincrement, session_id text, role text, content_json text,
                               created_timestamp integer, metadata_json text);""")
    con.execute("insert into sessions values ('s', 't', '/p', '2026-12-01')")
    for k, (role, text) in enumerate([("user", "hi"), ("assistant", "a"), ("assistant", "b")]):
        con.execute("insert into messages (session_id, role, content_json, created_timestamp) values ('s', ?, ?, ?)",
                    (role, json.dumps([{"type": "text", "text": text}]), k + 1))
    con.commit()
    con.close()
    return d / "sessions.db"


def mini_swe_agent_end(d: Path) -> Path:
    f = d / "run.traj.json"
    f.write_text(json.dumps({"trajectory_format": "mini-swe-agent-1.1", "info": {}, "messages": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "a"},
        {"role": "assistant", "content": "b"}, {"role": "exit", "content": "Submitted"}]}))
    return f


def opencode_storage_end(d: Path) -> Path:
    st = d / "storage"
    (st / "session" / "global").mkdir(parents=True)
    (st / "session" / "global" / "ses_x.json").write_text(json.dumps({"id": "ses_x", "time": {"created": 1}}))
    for mid, data, parts in _opencode_msgs():
        (st / "message" / "ses_x").mkdir(parents=True, exist_ok=True)
        (st / "message" / "ses_x" / f"{mid}.json").write_text(json.dumps({"id": mid, **data}))
        (st / "part" / mid).mkdir(parents=True)
        for pid, p in parts:
            (st / "part" / mid / f"{pid}.json").write_text(json.dumps({"id": pid, **p}))
    return st


def aider_tools(d: Path) -> tuple[Path, list[str]]:
    """Aider's history holds no tool calls and merges consecutive answers, so nothing in it can be
    refused; the tools the user supplies can (a tool that is not a function)."""
    f = d / ".aider.chat.history.md"
    f.write_text("# aider chat started at 2025-01-01 10:00:00\n\n#### question\n\nfirst answer\n\n"
                 "# aider chat started at 2025-01-02 10:00:00\n\nsecond answer\n")
    (d / "tools.json").write_text(json.dumps([{"type": "retrieval"}]))
    return f, ["--tools", str(d / "tools.json")]


CASES = {  # name: (builder, the format it is, the reason the replay refuses it)
    "openai-end": (openai_end, "openai", END), "openai-args": (openai_args, "openai", ARGS),
"chat-requests-args": (chat_requests_args, "chat-requests", ARGS),
    "traffic-log-args": (traffic_log_args, "traffic-log", ARGS), "sharegpt-end": (sharegpt_end, "sharegpt", END),
    "webui-end": (webui_end, "llamacpp-webui", END), "codex-args": (codex_args, "codex", ARGS),
    "claude-code-end": (claude_code_end, "claude-code", END), "qwen-code-end": (qwen_code_end, "qwen-code", END),
    "continue-end": (continue_end, "continue", END),
    "pi-end": (pi_end, "pi", END), "cline-end": (cline_end, "cline", END),
    "opencode-db-end": (opencode_db_end, "opencode", END), "opencode-storage-end": (opencode_storage_end, "opencode", END),
    "kilo-db-end": (kilo_db_end, "kilo", END), "crush-end": (crush_end, "crush", END),
    "goose-end": (goose_end, "goose", END), "mini-swe-agent-end": (mini_swe_agent_end, "mini-swe-agent", END),
    "aider-tools": (aider_tools, "aider", TOOL),
}


def _run(capsys, argv):
    rc = main(argv)
    out, err = capsys.readouterr()
    return rc, out, err


def test_every_format_is_covered():
    from replayer.core.session import registry

    # a --log-prompts-dir folder holds rendered prompts, not a conversation: the resume refuses it
    # whole before any layout (tests/test_prompt_log.py::test_bad_uses_are_one_line_and_non_zero)
    # a Gemini CLI chat is sent merged by role (consecutive replies are one model turn) with its
    # arguments as objects: none of the server's refusals can be reached from one
    # (tests/test_gemini_cli.py::test_two_replies_around_a_command_are_one_model_turn)
    assert {fmt for _, fmt, _ in CASES.values()} | {"prompt-log", "gemini-cli"} == set(registry.names())


@pytest.mark.parametrize("case", sorted(CASES))
def test_inspect_reports_counts_for_a_session_the_replay_refuses(case, tmp_path, capsys):
    build, fmt, reason = CASES[case]
    f = build(tmp_path)
    f, extra = f if isinstance(f, tuple) else (f, [])
    rc, out, err = _run(capsys, ["replay", str(f), "--a", "9859", "--b", "10001", *extra])
    assert rc == 2 and reason in err and len(err.strip().splitlines()) == 1, (rc, out, err)
    rc, out, err = _run(capsys, ["inspect", str(f), "--json", *extra])
    assert rc == 0, err
    info = json.loads(out)
    assert info["format"] == fmt and reason in info["replay_refused"]
    assert info["messages"] >= 1 and sum(info["roles"].values()) == info["messages"] and info["turns"] >= 1
    assert info["estimated_tokens"] == info["characters"] // 4 and info["user_starts"] == 0
    rc, text, err = _run(capsys, ["inspect", str(f), *extra])
    assert rc == 0, err
    assert f"  messages       {info['messages']}  (" in text and f"  turns          {info['turns']}  (" in text
    assert f"replay refused: {reason}" in text
    rc, md, err = _run(capsys, ["inspect", str(f), "--markdown", *extra])
    assert rc == 0, err
    assert f"| messages | {info['messages']} |" in md and f"| replay_refused | " in md and reason in md


def test_a_subagent_thread_that_cannot_be_read_leaves_the_counts_standing(tmp_path, capsys):
    """A 2.0.x agent file beside the session, of the same session, that holds no conversation:
    the main thread is inspected and replayed, the broken thread named in a note."""
    f = _jsonl(tmp_path / "s1.jsonl", [_cc("u1", None, "user", "hi"),
                                       _cc("a1", "u1", "assistant", [{"type": "text", "text": "a"}], "m1"),
                                       _cc("u2", "a1", "user", "more"),
                                       _cc("a2", "u2", "assistant", [{"type": "text", "text": "b"}], "m2")])
    _jsonl(tmp_path / "agent-1234abcd.jsonl", [{"sessionId": "s1", "type": "summary", "summary": "x",
                                                "leafUuid": "nowhere"}])
    rc, out, err = _run(capsys, ["inspect", str(f), "--json"])
    assert rc == 0, err
    info = json.loads(out)
    assert info["threads"] == {"main": 3} and info["messages"] == 4
    assert any(w.startswith("subagent thread agent-1234abcd left out: ") for w in info["warnings"])
    from replayer.core.session.turns import load_turns

    st = load_turns(f)
    assert len(st.turns) == 3 and any("agent-1234abcd left out" in n for n in st.notes)
