"""The histories before and after a compaction for OpenCode, Codex and Qwen Code, on small
hand-made files shaped as the real CLIs write them (tests/agents/test_*_compaction.py check the
same against the agents themselves): every request is a turn, those before the compaction from
``Session.earlier``, none of a response the compaction left, and the subagent placement's
response times line up with those turns."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

from replayer.core.session import load_session
from replayer.core.session.threads import message_times
from replayer.core.session.turns import earlier_turns, load_turns

FIXTURES = Path(__file__).parent.parent / "fixtures"


def _roles_texts(body: dict) -> list[tuple[str, str]]:
    return [(m["role"], m.get("content") if isinstance(m.get("content"), str) else "") for m in body["messages"]]


def _opencode(tmp_path: Path, tail: bool) -> Path:
    """The fixture's tool round and answer, a prompt folded into an automatic compaction (with
    ``tail_start_id`` on that prompt when ``tail``), its summary, OpenCode's synthetic "Continue…"
    prompt and the reply to it."""
    db = tmp_path / "opencode.db"
    shutil.copy(FIXTURES / "opencode/opencode.db", db)
    con = sqlite3.connect(db)
    t = 1790000003000
    compaction = {"type": "compaction", "auto": True} | ({"tail_start_id": "msg_003"} if tail else {})
    more = [("msg_003", {"role": "user"}, [{"type": "text", "text": "after"}]),
            ("msg_004", {"role": "user"}, [compaction]),
            ("msg_005", {"role": "assistant", "parentID": "msg_004", "summary": True, "mode": "compaction",
                         "finish": "stop"}, [{"type": "step-start"}, {"type": "text", "text": "the summary"}]),
            ("msg_006", {"role": "user"}, [{"type": "text", "text": "Continue if you have next steps", "synthetic": True}]),
            ("msg_007", {"role": "assistant", "parentID": "msg_006", "finish": "stop"},
             [{"type": "step-start"}, {"type": "text", "text": "continued"}])]
    for k, (mid, data, parts) in enumerate(more):
        when = t + 1000 * k
        data = data | {"time": {"created": when, "completed": when + 500}}
        con.execute("insert into message values (?,?,?,?,?)", (mid, "ses_fixture", when, when, json.dumps(data)))
        for n, p in enumerate(parts):
            con.execute("insert into part values (?,?,?,?,?,?)",
                        (f"prt_{mid}_{n}", mid, "ses_fixture", when, when, json.dumps(p)))
    con.commit()
    con.close()
    return db


def test_opencode_sends_the_summary_then_the_kept_tail_then_what_follows(tmp_path):
    for tail in (False, True):
        d = tmp_path / str(tail)
        d.mkdir()
        st = load_turns(_opencode(d, tail))
        s = st.session
        kept = [("user", "after")] if tail else []
        assert [(m.role, m.text()) for m in s.messages] == [
            ("user", "What did we do so far?"), ("assistant", "the summary"), *kept,
            ("user", "Continue if you have next steps"), ("assistant", "continued")]
        assert s.compacted_prefix == 2 + len(kept)  # the summary answered the summarization request
        # before the compaction: the prompt and the tool round (the folded prompt was never sent alone)
        # then its summarization request: the history OpenCode writes into its prompt (the kept
        # tail left out); without a capture, that history alone and a note on the missing prompt
        assert [[t.thread for t in g] for g in earlier_turns(s)] == [[None, None, "compaction"]]
        assert [m.role for m in s.earlier[0].messages] == ["user", "assistant", "tool", "assistant", "user"]
        sent = st.turns[:-1]
        assert len(sent) == 4
        summ = sent[2]
        assert [m["role"] for m in summ.messages] == ["user"] and "tools" not in summ.body
        assert summ.messages[0]["content"] == ('[User]: list files\n\n[Assistant tool call]: bash({"command":"ls"})\n'
                                               "[Tool result]: a.py\n[Assistant]: one file"
                                               + ("" if tail else "\n\n[User]: after"))  # the kept turn is not in it
        assert any("lacks OpenCode's summarization prompt" in n for n in summ.notes)
        assert _roles_texts(sent[3].body)[-1] == ("user", "Continue if you have next steps")
        assert not any(r == "tool" for r, _ in _roles_texts(sent[3].body))
        assert len(message_times(s)) == len(sent) - 1  # the main thread's requests
        assert message_times(s)[-1] == 1790000007000 / 1000  # the reply to "Continue…", not the summary


def _codex(tmp_path: Path) -> Path:
    """A compaction within a turn as Codex 0.171.0 writes it: the tool output, the summary as an
    assistant item, then the ``compacted`` record (handoff prefix + summary, replacement history)."""
    def item(p: dict) -> dict:
        return {"timestamp": "2026-12-03T10:00:00.000Z", "type": "response_item", "payload": p}

    def msg(role: str, text: str) -> dict:
        kind = "output_text" if role == "assistant" else "input_text"
        return {"type": "message", "role": role, "content": [{"type": kind, "text": text}]}

    summary = "Summary: the files were listed."
    handoff = "Another language model started to solve this problem.\n" + summary
    records = [{"timestamp": "2026-12-03T10:00:00.000Z", "type": "session_meta",
                "payload": {"id": "t1", "cwd": "/p", "cli_version": "0.171.0", "base_instructions": {"text": "B"}}},
               item(msg("user", "TOOL: list")), item({"type": "reasoning", "summary": [{"text": "r"}]}),
               item({"type": "function_call", "name": "exec_command", "arguments": "{}", "call_id": "c1"}),
               item({"type": "function_call_output", "call_id": "c1", "output": "a.py"}),
               item(msg("assistant", summary)),
               {"timestamp": "2026-12-03T10:00:01.000Z", "type": "compacted",
                "payload": {"message": handoff, "replacement_history": [msg("user", "TOOL: list"), msg("user", handoff)]}},
               item(msg("assistant", "Done.")), item(msg("user", "thanks")), item(msg("assistant", "Bye."))]
    f = tmp_path / "rollout-2026-12-03T10-00-00-t1.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in records))
    return f


def test_codex_history_before_a_compaction_leaves_out_the_summarization_reply(tmp_path):
    st = load_turns(_codex(tmp_path))
    s = st.session
    assert [m.role for m in s.earlier[0].messages] == ["user", "assistant", "tool"]  # no summary reply
    # the compaction came before [prompt, call, output]: that request, then the summarization's
    assert [[t.thread for t in g] for g in earlier_turns(s)] == [[None, "compaction"]]
    sent = st.turns[:-1]
    assert len(sent) == 4  # and after the compaction, the requests answered by Done. and by Bye.
    assert [r for r, _ in _roles_texts(sent[2].body)] == ["developer", "user", "user"]
    assert any("1 of them the summarization request (thread 'compaction')" in n for n in st.notes)
    # no capture: the summarization request is the history as sent, without Codex's prompt (its
    # code), with the conversation's developer prompt and no tools; a note says what is missing
    summ = sent[1]
    assert summ.thread == "compaction" and "tools" not in summ.body
    assert [m["role"] for m in summ.messages] == ["developer", "user", "assistant", "tool"]
    # its reply, after the messages sent (the turn's body holds it, as a conversation's turn holds the next ones)
    assert summ._body["messages"][summ.n_messages]["content"] == "Summary: the files were listed."
    assert any("lacks Codex's summarization prompt (~106 tokens missing, an estimate)" in n for n in summ.notes)


def test_codex_summarization_request_ends_with_the_captured_prompt(tmp_path):
    """With a capture that ran a compaction (``Capture.compaction``), the summarization request
    ends with the agent's prompt as a user message, and the note names the capture."""
    from replayer.core.agents import capture

    cap = capture.Capture("codex", "0.171.0", "responses", "developer", "B",
                          compaction={"prompt": "Summarize it all.", "system": "same", "tools": "none"})
    capture.save(cap)
    summ = next(t for t in load_turns(_codex(tmp_path)).turns if t.thread == "compaction")
    assert [(m["role"], m["content"] if isinstance(m["content"], str) else None) for m in summ.messages][-2:] == [
        ("tool", "a.py"), ("user", "Summarize it all.")]
    assert summ.messages[0]["role"] == "developer" and "tools" not in summ.body
    assert any("summarization prompt is from the capture of Codex 0.171.0" in n for n in summ.notes)


def test_codex_compaction_without_a_summary_item_keeps_the_whole_history(tmp_path):
    f = _codex(tmp_path)
    lines = [x for x in f.read_text().splitlines() if '"Summary: the files were listed."}]}}' not in x]
    f.write_text("\n".join(lines) + "\n")
    s = load_session(f)
    assert [m.role for m in s.earlier[0].messages] == ["user", "assistant", "tool"]


def _qwen(uuid: str, parent: str | None, type_: str, message: dict | None = None, **kw) -> dict:
    r = {"uuid": uuid, "parentUuid": parent, "sessionId": "s1", "timestamp": "2026-12-02T10:00:00.000Z",
         "type": type_, "cwd": "/p", "version": "0.24.4", **kw}
    return r | ({"message": message} if message is not None else {})


def test_qwen_code_history_before_a_compression_is_kept_and_its_requests_are_turns(tmp_path):
    history = [{"role": "user", "parts": [{"text": "<state_snapshot>S</state_snapshot>"}]},
               {"role": "model", "parts": [{"text": "Got it. Thanks for the additional context!"}]}]
    recs = [_qwen("u1", None, "user", {"role": "user", "parts": [{"text": "TOOL: ls"}]}),
            _qwen("a1", "u1", "assistant", {"role": "model", "parts": [
                {"functionCall": {"id": "c1", "name": "run_shell_command", "args": {"command": "ls"}}}]}),
            _qwen("t1", "a1", "tool_result", {"role": "user", "parts": [
                {"functionResponse": {"id": "c1", "name": "run_shell_command", "response": {"output": "a.py"}}}]}),
            _qwen("a2", "t1", "assistant", {"role": "model", "parts": [{"text": "Done."}]}),
            _qwen("c1", "a2", "system", subtype="chat_compression",
                  systemPayload={"info": {"compressionStatus": 1}, "compressedHistory": history}),
            _qwen("u2", "c1", "user", {"role": "user", "parts": [{"text": "after"}]}),
            _qwen("a3", "u2", "assistant", {"role": "model", "parts": [{"text": "Bye."}]})]
    f = tmp_path / "chat.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    st = load_turns(f)
    s = st.session
    assert [m.role for m in s.earlier[0].messages] == ["user", "assistant", "tool", "assistant"]
    assert [len(g) for g in earlier_turns(s)] == [3] and s.compacted_prefix == 2  # with the summarization's
    sent = st.turns[:-1]
    assert len(sent) == 4 and _roles_texts(sent[3].body)[-1][1] == "after"
    summ = sent[2]  # the whole history (no capture: without Qwen Code's prompt), its reply the snapshot
    assert summ.thread == "compaction" and [m["role"] for m in summ.messages] == ["user", "assistant", "tool",
                                                                                   "assistant"]
    assert summ._body["messages"][summ.n_messages]["content"] == "<state_snapshot>S</state_snapshot>"
    assert len(message_times(s)) == len(sent) - 1  # the main thread's requests
