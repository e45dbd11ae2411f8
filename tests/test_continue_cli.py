"""Continue sessions import as ``cn`` sends them again.

Hand-made from the shape ``cn`` 1.5.47 saves (``~/.continue/sessions/<id>.json``) and the way its
history-to-messages function sends it: context items before a user's text, a ``thinking``
message sent as an assistant message, after an assistant message with ``toolCallStates`` one
tool message per call (its outputs joined, or "Tool cancelled"). The real ``cn`` writing such a
file against the scripted model, every turn compared with what it sent, is
tests/agents/test_conformance.py (agent ``continue``)."""

from __future__ import annotations

import json

from replayer.core.session import detect_format, load_session
from replayer.core.session.discover import discover


def _call(i: str, name: str, args: dict) -> dict:
    return {"id": i, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def _session(tmp_path, root=None):
    d = (root or tmp_path / "home" / ".continue") / "sessions"
    d.mkdir(parents=True)
    f = d / "9f1c2d3e-0000-4000-8000-000000000001.json"
    history = [
        {"message": {"role": "user", "content": "What does main.py do?"}, "editorState": {},
         "contextItems": [{"name": "main.py", "description": "file", "content": "print('hi')"}]},
        {"message": {"role": "thinking", "content": "I should read it."}, "contextItems": []},
        {"message": {"role": "assistant", "content": "", "toolCalls": [_call("c1", "Read", {"filepath": "main.py"}),
                                                                      _call("c2", "Bash", {"command": "ls"})],
                     "usage": {"prompt_tokens": 900, "completion_tokens": 12, "model": "qwen3"}},
         "contextItems": [],
         "toolCallStates": [
             {"toolCallId": "c1", "toolCall": _call("c1", "Read", {"filepath": "main.py"}), "status": "done",
              "output": [{"content": "print('hi')", "name": "Tool Result"},
                         {"content": "(1 line)", "name": "Tool Result"}]},
             {"toolCallId": "c2", "toolCall": _call("c2", "Bash", {"command": "ls"}), "status": "canceled"}]},
        {"message": {"role": "assistant", "content": [{"type": "text", "text": "It prints hi."}]}, "contextItems": []},
    ]
    f.write_text(json.dumps({"sessionId": "9f1c2d3e", "title": "main.py", "workspaceDirectory": "/work/demo",
                             "history": history, "usage": {"promptTokens": 1800, "completionTokens": 20,
                                                           "promptTokensDetails": {"cachedTokens": 850}}}))
    (d / "sessions.json").write_text(json.dumps([{"sessionId": "9f1c2d3e", "title": "main.py"}]))
    return f


def test_a_session_imports_as_cn_sends_it(tmp_path):
    f = _session(tmp_path)
    assert detect_format(f) == "continue"
    s = load_session(f)
    got = [(m.role, m.text() if m.content is not None else None, [c.id for c in m.tool_calls], m.tool_call_id)
           for m in s.messages]
    assert got == [
        ("user", "<context name=\"main.py\">\nprint('hi')\n</context>\n\nWhat does main.py do?", [], None),
        ("assistant", "I should read it.", [], None),  # thinking: sent as an assistant message
        ("assistant", "", ["c1", "c2"], None),
        ("tool", "print('hi')\n(1 line)", [], "c1"),
        ("tool", "Tool cancelled", [], "c2"),
        ("assistant", "It prints hi.", [], None),
    ]
    assert s.cwd == "/work/demo" and s.title == "main.py" and s.model == "qwen3"
    assert s.usage.cache_read_tokens == 850
    assert s.system_prompt is None  # built at send time, never saved


def test_an_unnamed_session_is_titled_by_its_first_prompt(tmp_path):
    import orjson
    f = _session(tmp_path)
    doc = orjson.loads(f.read_bytes())
    f.write_bytes(orjson.dumps({**doc, "title": "Untitled Session"}))
    assert load_session(f).title is None


def test_the_index_file_is_no_session_and_the_picker_lists_sessions(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("CONTINUE_GLOBAL_DIR", raising=False)
    f = _session(tmp_path)
    found = [(x.agent, x.path) for x in discover()]
    assert ("continue", f) in found
    assert all(p.name != "sessions.json" for _, p in found)


def test_continue_global_dir_moves_the_sessions(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("CONTINUE_GLOBAL_DIR", str(tmp_path / "elsewhere"))
    f = _session(tmp_path, root=tmp_path / "elsewhere")
    assert ("continue", f) in [(x.agent, x.path) for x in discover()]


def test_a_call_whose_function_is_no_object_keeps_its_call_and_result(tmp_path):
    f = tmp_path / "a-b.json"
    f.write_text(json.dumps({"sessionId": "s", "history": [
        {"message": {"role": "user", "content": "hi"}},
        {"message": {"role": "assistant", "content": "", "toolCalls": [{"id": "c1", "function": "oops"}]},
         "toolCallStates": [{"toolCallId": "c1", "toolCall": {"function": [1]}, "output": [{"content": "x"}]}]},
        {"message": {"role": "user", "content": "ok"}}]}))
    s = load_session(f)
    assert [m.role for m in s.messages] == ["user", "assistant", "tool", "user"]
    assert s.messages[1].tool_calls[0].id == "c1" and s.messages[2].content == "x"
