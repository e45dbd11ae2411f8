"""Gemini CLI chats import as Gemini CLI resumes them.

The files are written from the record types of ``@google/gemini-cli-core`` 0.61.0
(``chatRecordingTypes.d.ts``: the metadata line, ``MessageRecord``, ``$rewindTo``, ``$set``)
and read the way its ``loadConversationRecord`` and ``convertSessionToClientHistory`` read
them: a message written again replaces itself where it stands, a rewind drops the message and
everything after it, ``info``/``error``/``warning`` and slash commands are never sent, a reply's
tool results are the next user turn."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replayer.cli import main
from replayer.core.session import detect_format, load_session
from replayer.core.session.discover import discover
from replayer.core.session.turns import load_turns

META = {"sessionId": "5b1e0f2a-9c1d-4d7e-8f00-1234567890ab", "projectHash": "a" * 64,
        "startTime": "2026-11-30T10:00:00.000Z", "lastUpdated": "2026-11-30T10:05:00.000Z", "kind": "main"}


def _t(s: int) -> str:
    return f"2026-11-30T10:0{s // 60}:{s % 60:02d}.000Z"


def _user(i: str, text: str, s: int) -> dict:
    return {"id": i, "timestamp": _t(s), "type": "user", "content": [{"text": text}]}


def _lines(*records: dict) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


CALL = {"id": "call-1", "name": "read_file", "args": {"file_path": "README.md"}, "status": "success",
        "timestamp": _t(20), "result": [{"functionResponse": {"id": "call-1", "name": "read_file",
                                                              "response": {"output": "# demo\n"}}}]}
REPLY_1 = {"id": "m2", "timestamp": _t(15), "type": "gemini", "model": "gemini-2.5-pro",
           "content": [{"text": "Let me look.", "thought": True},
                       {"functionCall": {"id": "call-1", "name": "read_file", "args": {"file_path": "README.md"}}}],
           "toolCalls": [CALL], "tokens": {"input": 900, "output": 20, "cached": 0, "total": 920}}
REPLY_2 = {"id": "m3", "timestamp": _t(30), "type": "gemini", "model": "gemini-2.5-pro",
           "content": [{"text": "It is a demo."}],
           "tokens": {"input": 1000, "output": 6, "cached": 850, "total": 1006}}


def _chat(tmp_path: Path) -> Path:
    """A chat with a streamed reply rewritten, a rewound question, a slash command and an info line."""
    chats = tmp_path / ".gemini" / "tmp" / "demo-project" / "chats"
    chats.mkdir(parents=True)
    path = chats / "session-2026-11-30T10-00-5b1e0f2a.jsonl"
    path.write_text(_lines(
        META,
        _user("m1", "What is in README.md?", 10),
        dict(REPLY_1, content=[{"text": "Let me", "thought": True}], toolCalls=[]),  # streaming
        REPLY_1,  # the same id written again: replaces it in place
        {"id": "i1", "timestamp": _t(21), "type": "info", "content": "Tool approved"},
        REPLY_2,
        _user("m4", "and the licence?", 40),
        {"$rewindTo": "m4"},  # the user rewound that question away
        _user("m5", "/stats", 45),  # a slash command: never sent
        _user("m6", "Thanks, summarise it.", 50),
        {"$set": {"lastUpdated": _t(55), "summary": "README demo"}},
    ))
    return path


def test_a_chat_imports_as_gemini_cli_resumes_it(tmp_path):
    path = _chat(tmp_path)
    assert detect_format(path) == "gemini-cli"
    s = load_session(path)
    got = [(m.role, m.text() if m.content is not None else None, [c.name for c in m.tool_calls], m.tool_call_id)
           for m in s.messages]
    assert got == [
        ("user", "What is in README.md?", [], None),
        ("assistant", None, ["read_file"], None),
        ("tool", "# demo\n", [], "call-1"),
        ("assistant", "It is a demo.", [], None),
        ("user", "Thanks, summarise it.", [], None),
    ]
    assert s.messages[1].reasoning is None  # thoughts are not sent back
    assert json.loads(s.messages[1].tool_calls[0].arguments) == {"file_path": "README.md"}
    assert s.title == "README demo" and s.model == "gemini-2.5-pro"
    assert s.usage.cache_read_tokens == 850 and s.usage.input_tokens == 1000
    assert any("Gemini API" in w for w in s.warnings)


def test_an_older_whole_document_chat_with_thoughts_and_tool_calls_beside_the_text(tmp_path):
    doc = dict(META, messages=[
        _user("m1", "What is in README.md?", 10),
        {"id": "m2", "timestamp": _t(15), "type": "gemini", "content": "Reading it.",
         "thoughts": [{"subject": "Plan", "description": "read the file", "timestamp": _t(14)}],
         "toolCalls": [dict(CALL, result="# demo\n")]},
        {"id": "e1", "timestamp": _t(16), "type": "error", "content": "quota"},
    ])
    path = tmp_path / "session-2026-11-30T10-00-5b1e0f2a.json"
    path.write_text(json.dumps(doc))
    assert detect_format(path) == "gemini-cli"
    s = load_session(path)
    assert [m.role for m in s.messages] == ["user", "assistant", "tool"]
    assert s.messages[1].content == "Reading it." and s.messages[1].reasoning is None
    assert s.messages[2].content == "# demo\n" and s.messages[2].tool_call_id == "call-1"  # from toolCalls


def test_as_the_cli_writes_it_each_process_sends_the_history_it_held(tmp_path):
    """The shape Gemini CLI 0.61.0 wrote in a real run: the environment context a record of its
    own before the prompt, the result both in the reply's toolCalls and as a user record, ids
    prefixed with the tool's name; then a --resume: a second metadata line and the history it
    loaded rewritten (``$set``), with the result twice (once as ``<reply id>_response``)."""
    cid = "run_shell_command__run_shell_command_1796354961627_0"
    result = [{"functionResponse": {"id": cid, "name": "run_shell_command", "response": {"output": "hello.txt"}}}]
    ctx = _user("ctx", "<session_context>\nThis is the Gemini CLI.\n- **Workspace Directories:**\n  - /work/demo\n"
                       "</session_context>", 1)
    prompt = _user("p1", "TOOL: list the files here", 2)
    call = {"id": "r1", "timestamp": _t(3), "type": "gemini", "content": "",
            "thoughts": [{"subject": "", "description": "The user wants a tool run.", "timestamp": _t(3)}],
            "toolCalls": [{"id": cid, "name": "run_shell_command", "args": {"command": "ls"}, "status": "success",
                           "timestamp": _t(3), "result": result}]}
    answer = {"id": "u2", "timestamp": _t(4), "type": "user", "content": result}
    done = {"id": "r2", "timestamp": _t(5), "type": "gemini", "content": "Done."}
    rewritten = [ctx, prompt, dict(call, content=[{"text": "The user wants a tool run.", "thought": True},
                                                  {"functionCall": {"id": cid, "name": "run_shell_command",
                                                                    "args": {"command": "ls"}}}]),
                 {"id": "r1_response", "timestamp": _t(3), "type": "user", "content": result}, answer, done]
    path = tmp_path / "session-x.jsonl"
    path.write_text(_lines(META, {"$set": {"messages": [ctx]}}, prompt, call, answer, done,
                           META, {"$set": {"messages": rewritten}}, _user("p2", "thanks", 6),
                           {"id": "r3", "timestamp": _t(7), "type": "gemini", "content": "Hello."}))
    s = load_session(path)
    assert [m.role for m in s.earlier[0].messages] == ["user", "assistant", "tool", "assistant"]  # as first sent
    assert [m.role for m in s.messages] == ["user", "assistant", "tool", "tool", "assistant", "user", "assistant"]
    assert s.messages[0].text().endswith("</session_context>\nTOOL: list the files here")
    assert s.cwd == "/work/demo"
    assert s.messages[1].tool_calls[0].id == s.messages[2].tool_call_id == "run_shell_command_1796354961627_0"
    assert s.compacted_prefix == 5  # the resumed process's own requests start at its prompt
    assert any("resumed 1 time" in w and "twice" in w for w in s.warnings)
    turns = load_turns(path).turns[:-1]  # the last: the next request, not sent
    assert [[m["role"] for m in t.body["messages"]] for t in turns] == [
        ["user"], ["user", "assistant", "tool"], ["user", "assistant", "tool", "tool", "assistant", "user"]]


def test_two_replies_around_a_command_are_one_model_turn(tmp_path):
    """Measured with 0.61.0: ``-p /compress`` then ``--resume``: the command is not sent again,
    and the two replies around it go out as one model turn of two text parts."""
    path = tmp_path / "c.jsonl"
    path.write_text(_lines(META, _user("m1", "hi", 1),
                           {"id": "r1", "timestamp": _t(2), "type": "gemini", "content": "Done."},
                           _user("m2", "/compress", 3),
                           {"id": "r2", "timestamp": _t(4), "type": "gemini", "content": "Hello."},
                           _user("m3", "after", 5)))
    s = load_session(path)
    assert [(m.role, m.text()) for m in s.messages] == [("user", "hi"), ("assistant", "Done.Hello."), ("user", "after")]


def test_a_rewind_to_an_unknown_id_drops_everything_before_it(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(_lines(META, _user("m1", "first", 1), {"$rewindTo": "nope"}, _user("m2", "second", 2)))
    assert [m.text() for m in load_session(path).messages] == ["second"]


def test_a_chat_of_only_ui_records_is_refused_in_one_line(tmp_path, capsys):
    path = tmp_path / "c.jsonl"
    path.write_text(_lines(META, {"id": "i1", "timestamp": _t(1), "type": "info", "content": "hi"}))
    assert main(["inspect", str(path)]) != 0
    err = capsys.readouterr().err
    assert "no Gemini CLI messages" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_replay_names_what_the_rebuild_lacks(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # no capture of the user's
    assert main(["replay", str(_chat(tmp_path)), "--json"]) == 0
    notes = json.dumps(json.loads(capsys.readouterr().out))
    assert "Gemini API" in notes
    assert "does not store the system prompt and tools" in notes and "`replayer agents capture`" in notes
    # a format no agent of replayer's writes: nothing to capture, so no such advice
    body = tmp_path / "body.json"
    body.write_text(json.dumps({"messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "a"}, {"role": "user", "content": "ok"}]}))
    assert main(["replay", str(body), "--json"]) == 0
    notes = json.dumps(json.loads(capsys.readouterr().out))
    assert "does not store the system prompt and tools" in notes and "agents capture" not in notes


@pytest.mark.parametrize("env", [None, "GEMINI_CLI_HOME"])
def test_the_picker_lists_gemini_cli_chats(tmp_path, monkeypatch, env):
    home = tmp_path / "home"
    other = tmp_path / "gemini-home"
    root = other if env else home
    monkeypatch.setenv("HOME", str(home))
    if env:
        monkeypatch.setenv(env, str(other))
    else:
        monkeypatch.delenv("GEMINI_CLI_HOME", raising=False)
    path = _chat(root)
    sub = path.parent / META["sessionId"]
    sub.mkdir()
    (sub / "3f2e.jsonl").write_text(_lines(dict(META, kind="subagent"), _user("s1", "task", 1)))
    found = [(f.agent, f.path) for f in discover()]
    assert ("gemini-cli", path) in found
    assert ("gemini-cli", sub / "3f2e.jsonl") not in found  # a subagent's chat is its parent's thread


def test_a_subagents_chat_is_a_thread_of_its_parent_and_ids_stay_in_the_folder(tmp_path):
    from replayer.core.session.formats.gemini_cli import subagent_files
    from replayer.core.session.turns import MAIN, thread_of

    path = _chat(tmp_path)
    sub = path.parent / META["sessionId"] / "3f2e.jsonl"
    sub.parent.mkdir()
    sub.write_text(_lines(dict(META, sessionId="3f2e", kind="subagent"), _user("s1", "list the files", 16),
                          {"id": "s2", "timestamp": _t(17), "type": "gemini", "content": "two files"}))
    assert subagent_files(path, META["sessionId"]) == [sub]
    st = load_turns(path)
    assert [thread_of(t) for t in st.turns[:-1]].count("3f2e") == 1 and thread_of(st.turns[0]) == MAIN
    assert load_session(sub).format_version == "subagent"
    for hostile in ("../x", "/etc", "..", "a/b"):
        assert subagent_files(path, hostile) == []


def test_directories_that_are_no_list_give_no_folder_and_images_count_once_over_a_resume(tmp_path):
    image = {"id": "u1", "timestamp": _t(1), "type": "user",
             "content": [{"text": "see"}, {"inlineData": {"mimeType": "image/png", "data": "aGk="}}]}
    reply = {"id": "r1", "timestamp": _t(2), "type": "gemini", "content": "ok"}
    path = tmp_path / "c.jsonl"
    path.write_text(_lines(dict(META, directories="abc"), image, reply, META, _user("u2", "more", 3),
                           {"id": "r2", "timestamp": _t(4), "type": "gemini", "content": "fine"}))
    s = load_session(path)
    assert s.cwd is None and len(s.earlier) == 1
    assert s.stats.image_placeholders == 1
