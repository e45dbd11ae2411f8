"""The importers of issue #22, on small hand-made files: Qwen Code, Cline, and the fixes to
Claude Code, Codex, pi and Aider (each a defect found against the real agents or samples)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replayer.core.session import build_request, detect_format, load_session


def _jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _qwen(uuid: str, parent: str | None, type_: str, message: dict | None = None, **kw) -> dict:
    r = {"uuid": uuid, "parentUuid": parent, "sessionId": "s1", "timestamp": "2026-12-02T10:00:00.000Z",
         "type": type_, "cwd": "/p", "version": "0.24.4", **kw}
    if message is not None:
        r["message"] = message
    return r


def test_qwen_code_is_not_read_as_claude_code_and_keeps_its_tool_round(tmp_path):
    f = _jsonl(tmp_path / "chat.jsonl", [
        _qwen("u1", None, "user", {"role": "user", "parts": [{"text": "list files"}]}),
        _qwen("s1", "u1", "system", subtype="ui_telemetry", systemPayload={"uiEvent": {}}),
        _qwen("a1", "s1", "assistant", {"role": "model", "parts": [
            {"text": "thinking", "thought": True},
            {"functionCall": {"id": "c1", "name": "run_shell_command", "args": {"command": "ls"}}}]}, model="m"),
        _qwen("t1", "a1", "tool_result", {"role": "user", "parts": [
            {"functionResponse": {"id": "c1", "name": "run_shell_command", "response": {"output": "a.txt"}}}]}),
        _qwen("a2", "t1", "assistant", {"role": "model", "parts": [{"text": "One file."}]}),
    ])
    assert detect_format(f) == "qwen-code"
    s = load_session(f)
    assert [m.role for m in s.messages] == ["user", "assistant", "tool", "assistant"]
    assert s.messages[1].reasoning == "thinking"
    assert s.messages[1].tool_calls[0].name == "run_shell_command"
    assert json.loads(s.messages[1].tool_calls[0].arguments) == {"command": "ls"}
    assert s.messages[2].content == "a.txt" and s.messages[2].tool_call_id == "c1"
    assert s.agent_version == "0.24.4" and s.model == "m"


def _cc(uuid: str, parent: str | None, type_: str, content, **kw) -> dict:
    role = "assistant" if type_ == "assistant" else "user"
    msg = {"role": role, "content": content}
    if type_ == "assistant":
        msg.update(id=kw.pop("mid", f"m_{uuid}"), model=kw.pop("model", "claude-x"))
    return {"uuid": uuid, "parentUuid": parent, "sessionId": "s", "type": type_, "version": "2.1.6",
            "timestamp": "2026-01-01T00:00:00Z", "message": msg, **kw}


def _compacted(tmp_path, extra: list[dict], preserved: dict | None = None) -> Path:
    meta = {"trigger": "manual", "preTokens": 1000}
    if preserved:
        meta["preservedSegment"] = preserved
    return _jsonl(tmp_path / "cc.jsonl", [
        _cc("u0", None, "user", "old question"),
        _cc("a0", "u0", "assistant", [{"type": "text", "text": "old answer"}]),
        {"uuid": "cb", "parentUuid": None, "logicalParentUuid": "a0", "sessionId": "s", "type": "system",
         "subtype": "compact_boundary", "compactMetadata": meta},
        _cc("cs", "cb", "user", "This session is being continued. Summary: old stuff.",
            isCompactSummary=True, isVisibleInTranscriptOnly=True),
        *extra,
    ])


def test_claude_code_keeps_the_compaction_summary_and_merges_it_with_the_next_prompt(tmp_path):
    f = _compacted(tmp_path, [_cc("u1", "cs", "user", "next"), _cc("a1", "u1", "assistant", [{"type": "text", "text": "ok"}])])
    msgs = build_request(load_session(f)).messages
    assert [m["role"] for m in msgs] == ["user", "assistant"]
    assert [p["text"] for p in msgs[0]["content"]] == ["This session is being continued. Summary: old stuff.", "next"]


def test_claude_code_puts_the_preserved_segment_back_after_the_summary(tmp_path):
    f = _compacted(tmp_path, [_cc("u1", "cs", "user", "next"), _cc("a1", "u1", "assistant", [{"type": "text", "text": "ok"}])],
                   preserved={"headUuid": "u0", "anchorUuid": "cs", "tailUuid": "a0"})
    s = load_session(f)
    assert [m.text() for m in s.messages] == [  # summary and kept question are consecutive user records
        "This session is being continued. Summary: old stuff.\nold question", "old answer", "next", "ok"]


def test_claude_code_makes_no_turn_of_a_response_the_compaction_kept(tmp_path):
    """The kept answer was sent the history before the compaction, not the summary: the turns
    are the request after it (summary, kept stretch, next prompt) and the resume."""
    from replayer.core.session.turns import load_turns

    f = _compacted(tmp_path, [_cc("u1", "cs", "user", "next"), _cc("a1", "u1", "assistant", [{"type": "text", "text": "ok"}])],
                   preserved={"headUuid": "u0", "anchorUuid": "cs", "tailUuid": "a0"})
    st = load_turns(f)
    # the request before the compaction (the old question: the records before the boundary stay
    # in the file), then the one after it, before "ok" only
    assert [t.n_messages for t in st.turns[:-1]] == [1, len(st.request.messages) - 1]
    assert [m["content"] for m in st.turns[0].messages] == ["old question"]
    assert any("1 response(s) the compaction kept" in n for n in st.notes)
    assert any("1 turn(s) are the requests sent before it" in n for n in st.notes)
    plain = load_turns(_compacted(tmp_path, [_cc("u1", "cs", "user", "next"),
                                             _cc("a1", "u1", "assistant", [{"type": "text", "text": "ok"}])]))
    # nothing kept: the turn before the compaction, its summarization request (the whole history:
    # no capture, so without Claude Code's prompt), one after it and the resume
    assert len(plain.turns) == 4 and plain.request.compacted_prefix == 0
    summ = plain.turns[1]
    assert summ.thread == "compaction" and [m["content"] for m in summ.messages] == ["old question", "old answer"]
    assert any("lacks Claude Code's summarization prompt (~1,590 tokens missing" in n for n in summ.notes)
    # the preserved segment (the whole history here) was not sent with it: no such request to rebuild
    assert not any(t.thread == "compaction" for t in st.turns)


def test_claude_code_drops_synthetic_turns_and_flags_orphans_and_image_results(tmp_path):
    f = _jsonl(tmp_path / "cc.jsonl", [
        _cc("u1", None, "user", "look"),
        _cc("a1", "u1", "assistant", [{"type": "tool_use", "id": "t1", "name": "Read", "input": {"p": "x.png"}}]),
        _cc("r1", "a1", "user", [{"type": "tool_result", "tool_use_id": "t1", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}]),
        _cc("r2", "r1", "user", [{"type": "tool_result", "tool_use_id": "gone", "content": "lost"}]),
        _cc("a2", "r2", "assistant", [{"type": "text", "text": "No response requested."}], model="<synthetic>"),
        _cc("u2", "a2", "user", "again"),
        _cc("a3", "u2", "assistant", [{"type": "text", "text": "fine"}]),
    ])
    s = load_session(f)
    assert "No response requested." not in [m.text() for m in s.messages] and s.stats.dropped_turns == 1
    assert s.messages[2].content == "(image omitted: model does not support images)"
    assert s.stats.image_placeholders == 1 and s.stats.orphan_results == 1
    assert any("no call" in w for w in s.warnings) and any("placeholders" in w for w in s.warnings)


def test_inspect_reports_counts_for_a_session_the_replay_must_refuse(tmp_path, capsys):
    from replayer.cli import main

    f = tmp_path / "body.json"
    f.write_text(json.dumps({"messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "x", "arguments": "not json{"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "r"},
        {"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}]}))
    assert main(["inspect", str(f)]) == 0
    out = capsys.readouterr().out
    assert "messages       5  (user 1, assistant 3, tool 1)" in out and "tool calls     1, results 1" in out
    assert "replay refused: cannot have 2 or more assistant messages at the end of the list" in out


def test_aider_restores_every_chat_session_of_the_file(tmp_path):
    f = tmp_path / ".aider.chat.history.md"
    f.write_text("# aider chat started at 2025-01-01 10:00:00\n\n#### first question\n\nfirst answer\n\n"
                 "# aider chat started at 2025-01-02 10:00:00\n\n#### second question\n\nsecond answer\n")
    s = load_session(f)
    assert [m.text() for m in s.messages] == ["first question", "first answer", "second question", "second answer"]
    assert any("2 aider chat sessions" in w for w in s.warnings)


def test_a_capture_takes_the_sessions_folder_home_and_date():
    from replayer.core.agents.capture import Capture, personalised

    cap = Capture("qwen", "1", "chat", system_prompt="cwd /tmp/cap_x1/project, memory /tmp/cap_x1/.qwen/projects/"
                  "-tmp-cap-x1-project/memory, today 2026-12-02", tools=[{"d": "in /tmp/cap_x1/project"}],
                  project="/tmp/cap_x1/project", home="/tmp/cap_x1", date="2026-12-02")
    prompt, tools = personalised(cap, "/home/u/my.proj", 1767225600.0, "/home/u")  # 2026-01-01
    assert prompt == "cwd /home/u/my.proj, memory /home/u/.qwen/projects/-home-u-my-proj/memory, today 2026-01-01"
    assert tools == [{"d": "in /home/u/my.proj"}]


def test_qwen_code_turns_carry_the_date_reminder_before_their_own_runs_prompt_only(tmp_path, monkeypatch):
    """Qwen Code re-sends its startup parts before the first prompt in every request, but the date
    reminder only before the prompt that opened the run (kept in memory, not in the file): a
    request of the second run re-sends the first prompt without it."""
    from replayer.core.agents import capture
    from replayer.core.session.turns import load_turns

    monkeypatch.setenv("REPLAYER_AGENTS_DIR", str(tmp_path / "caps"))
    capture.save(capture.Capture("qwen", "0.24.4", "chat", system_prompt="P", tools=[{"type": "function"}],
                                 first_user_prefix=["SKILLS", "CONTEXT", "DATE"], later_user_prefix=["DATE"]))
    f = _jsonl(tmp_path / "chat.jsonl", [
        _qwen("u1", None, "user", {"role": "user", "parts": [{"text": "TOOL: ls"}]}),
        _qwen("a1", "u1", "assistant", {"role": "model", "parts": [
            {"functionCall": {"id": "c1", "name": "run_shell_command", "args": {"command": "ls"}}}]}),
        _qwen("t1", "a1", "tool_result", {"role": "user", "parts": [
            {"functionResponse": {"id": "c1", "name": "run_shell_command", "response": {"output": "a"}}}]}),
        _qwen("a2", "t1", "assistant", {"role": "model", "parts": [{"text": "Done."}]}),
        _qwen("u2", "a2", "user", {"role": "user", "parts": [{"text": "thanks"}]}),
        _qwen("a3", "u2", "assistant", {"role": "model", "parts": [{"text": "Bye."}]}),
    ])
    turns = load_turns(f).turns

    def users(t):
        return [[p["text"] for p in m["content"]] for m in t.messages if m["role"] == "user"]

    assert [users(t) for t in turns] == [
        [["SKILLS", "CONTEXT", "DATE", "TOOL: ls"]],
        [["SKILLS", "CONTEXT", "DATE", "TOOL: ls"]],
        [["SKILLS", "CONTEXT", "TOOL: ls"], ["DATE", "thanks"]],
        [["SKILLS", "CONTEXT", "TOOL: ls"], ["DATE", "thanks"]],
    ]
    assert turns[2].message(2) is turns[1].message(2)  # one body per run, the messages shared


def test_qwen_code_with_a_one_process_capture_the_session_is_one_run(tmp_path, monkeypatch):
    """A capture made as one process (``--one-process``: the date before the first prompt, nothing
    before the later one): every turn carries the startup parts and the date before the first
    prompt, none before the later prompt, and a note says the session is taken as one run."""
    from replayer.core.agents import capture
    from replayer.core.session.turns import load_turns

    monkeypatch.setenv("REPLAYER_AGENTS_DIR", str(tmp_path / "caps"))
    capture.save(capture.Capture("qwen", "0.24.4", "chat", system_prompt="P", tools=[{"type": "function"}],
                                 first_user_prefix=["SKILLS", "DATE"], later_user_prefix=[], one_process=True))
    f = _jsonl(tmp_path / "chat.jsonl", [
        _qwen("u1", None, "user", {"role": "user", "parts": [{"text": "hi"}]}),
        _qwen("a1", "u1", "assistant", {"role": "model", "parts": [{"text": "Hello."}]}),
        _qwen("u2", "a1", "user", {"role": "user", "parts": [{"text": "thanks"}]}),
        _qwen("a2", "u2", "assistant", {"role": "model", "parts": [{"text": "Bye."}]}),
    ])
    st = load_turns(f)

    def texts(m):
        return [p["text"] for p in m["content"]] if isinstance(m["content"], list) else [m["content"]]

    assert [[texts(m) for m in t.messages if m["role"] == "user"] for t in st.turns] == [
        [["SKILLS", "DATE", "hi"]], [["SKILLS", "DATE", "hi"], ["thanks"]], [["SKILLS", "DATE", "hi"], ["thanks"]]]
    assert any("taken as one run" in n for n in st.request.notes)


@pytest.mark.parametrize("prompt,suffix", [("TOOL: list the files here", "664"), ("list the files", "93d"),
                                           ("SUBAGENT: have a helper look around", "1ee"), ("hi", "18b"),
                                           ("héllo wörld 😀 emoji 🎉 here ok", "a2a")])
def test_claude_codes_billing_header_fingerprints_the_first_prompt(prompt, suffix):
    """The ``NNN`` of ``cc_version=2.1.332.NNN``, as Claude Code 2.1.332 sent it for these first
    prompts ("hi": past its end every picked character is "0"; the emoji: JavaScript indices count
    UTF-16 code units, so the 21st unit is not the 21st character)."""
    from replayer.core.session.formats.claude_wire import billing_header

    assert billing_header("2.1.332", "sdk-cli", prompt) == \
        f"x-anthropic-billing-header: cc_version=2.1.332.{suffix}; cc_entrypoint=sdk-cli;"


@pytest.mark.samples
def test_the_public_claude_code_samples_keep_the_summary_and_have_no_orphans():
    from conftest import SAMPLES, need_shared

    folder = need_shared(SAMPLES / "claude-code")
    sessions = {f.name: load_session(f) for f in sorted(folder.glob("*.jsonl"))}
    assert len(sessions) == 6 and all(s.stats.orphan_results == 0 for s in sessions.values())
    compacted = sessions["daaain-claude-code-log_FIXTURE_dag_compact_after_rewind.jsonl"]
    assert compacted.messages[0].text().startswith("This session is being continued")
    assert compacted.messages[0].text().endswith("After compaction")  # the next prompt, merged


def test_agents_capture_one_process_for_an_agent_that_cannot_is_a_one_line_error(capsys):
    from replayer.cli import main

    assert main(["agents", "capture", "pi", "--one-process"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot be run headless as one process" in err[0] and "Traceback" not in err[0]


def test_claude_code_preserved_segment_of_the_wrong_type_is_ignored_not_a_failed_import(tmp_path):
    """A ``tailUuid`` that is not a string (a damaged file) keeps nothing after the summary and
    leaves the summarization request the whole history (it made the import fail before)."""
    from replayer.core.session.turns import load_turns

    f = _compacted(tmp_path, [_cc("u1", "cs", "user", "next")], preserved={"headUuid": 5, "tailUuid": ["a0"]})
    st = load_turns(f)
    summ = next(t for t in st.turns if t.thread == "compaction")
    assert [m["content"] for m in summ.messages] == ["old question", "old answer"]
    assert st.session.compacted_prefix == 0
