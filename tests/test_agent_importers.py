"""The importers of issue #22, on small hand-made files: Qwen Code, Cline, and the fixes to
Claude Code, Codex, pi and Aider (each a defect found against the real agents or samples)."""

from __future__ import annotations

import json
from pathlib import Path

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
