"""mini-swe-agent trajectories import as the requests it sent: the messages less ``extra``.

Checked once against the real ``mini`` (2.4.6, pip, ``-m openai/scripted`` with the model's
``api_base`` at replayer's stub; not in the npm suite): its first request equals the rebuild,
tools included; the stub's plain-text replies after the tool round ended the run in three format
errors, requests that are no turns (below).

Hand-made in the shape mini-swe-agent 2.4.6 saves (``DefaultAgent.serialize``: ``info`` with the
model's config and class, ``messages``, ``trajectory_format``; a tool-calling ``LitellmModel``
run: its assistant messages as litellm dumps them, tool results with ``tool_call_id``, the
closing ``exit`` message). Its own prompts are not used here: the system and task texts are
made up."""

from __future__ import annotations

import json

import pytest

from replayer.core.errors import ImportFailed
from replayer.core.session import detect_format, load_session
from replayer.core.session.formats.mini_swe_agent import BASH_TOOL


def trajectory(model_type: str = "minisweagent.models.litellm_model.LitellmModel") -> dict:
    call = {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
    return {
        "info": {"mini_version": "2.4.6", "exit_status": "Submitted", "submission": "",
                 "config": {"model": {"model_name": "openai/qwen3", "model_kwargs": {}}, "model_type": model_type}},
        "messages": [
            {"role": "system", "content": "You are a test agent.", "extra": {}},
            {"role": "user", "content": "Fix the bug in a.py", "extra": {}},
            {"role": "assistant", "content": None, "tool_calls": [call], "function_call": None,
             "extra": {"actions": [{"command": "ls", "tool_call_id": "call_1"}], "cost": 0.0, "timestamp": 1.0}},
            {"role": "tool", "tool_call_id": "call_1", "content": "<returncode>0</returncode>\na.py",
             "extra": {"raw_output": "a.py", "returncode": 0}},
            {"role": "assistant", "content": "Done.", "extra": {"actions": []}},
            {"role": "exit", "content": "Submitted", "extra": {"exit_status": "Submitted", "submission": ""}},
        ],
        "trajectory_format": "mini-swe-agent-1.1",
    }


def test_a_tool_calling_run_is_the_messages_it_sent_with_its_bash_tool(tmp_path):
    f = tmp_path / "task.traj.json"
    f.write_text(json.dumps(trajectory()))
    assert detect_format(f) == "mini-swe-agent"
    s = load_session(f)
    assert s.format == "mini-swe-agent" and s.agent_version == "2.4.6" and s.model == "openai/qwen3"
    assert s.system_prompt == "You are a test agent." and s.tools == [BASH_TOOL]
    assert [m.role for m in s.messages] == ["user", "assistant", "tool", "assistant"]  # no exit message
    assert s.messages[1].tool_calls[0].name == "bash" and s.messages[2].tool_call_id == "call_1"
    assert any("1 'exit' message(s) left out" in w for w in s.warnings)
    assert not any("could not parse" in w for w in s.warnings)


def test_a_reply_it_could_not_parse_is_counted_not_made_a_turn(tmp_path):
    t = trajectory()
    err = {"role": "user", "content": "Tool call error: no tool calls found", "extra": {
        "interrupt_type": "FormatError", "cost": 0.0, "response": {"choices": [{"message": {"content": "hm"}}]}}}
    t["messages"][4:5] = [err]  # the reply after the tool round did not parse; then the run ended
    f = tmp_path / "e.traj.json"
    f.write_text(json.dumps(t))
    s = load_session(f)
    assert [m.role for m in s.messages] == ["user", "assistant", "tool", "user"]
    assert any("1 request(s) were answered by a reply mini-swe-agent could not parse" in w for w in s.warnings)


def test_the_text_based_models_send_no_tools_and_another_class_is_named(tmp_path):
    f = tmp_path / "a.traj.json"
    f.write_text(json.dumps(trajectory("minisweagent.models.litellm_textbased_model.LitellmTextbasedModel")))
    s = load_session(f)
    assert s.tools is None and not any("are not known" in w for w in s.warnings)
    f.write_text(json.dumps(trajectory("my.models.Custom")))
    s = load_session(f)
    assert s.tools is None and any("model class my.models.Custom are not known" in w for w in s.warnings)


def test_a_responses_api_trajectory_is_refused_in_one_line(tmp_path):
    t = trajectory()
    t["messages"][2] = {"object": "response", "output": [], "extra": {}}
    f = tmp_path / "r.traj.json"
    f.write_text(json.dumps(t))
    with pytest.raises(ImportFailed, match="Responses API model, not read"):
        load_session(f)


def test_a_plain_openai_body_is_still_openai(tmp_path):
    body = {"messages": trajectory()["messages"][:2]}
    f = tmp_path / "body.json"
    f.write_text(json.dumps(body))
    assert detect_format(f) == "openai"


def test_the_picker_looks_in_its_config_folder(tmp_path, monkeypatch):
    from replayer.core.session.discover import default_roots

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("MSWEA_GLOBAL_CONFIG_DIR", raising=False)
    assert ("mini-swe-agent", tmp_path / ".config" / "mini-swe-agent", "*.traj.json") in default_roots()
    monkeypatch.setenv("MSWEA_GLOBAL_CONFIG_DIR", str(tmp_path / "m"))
    assert ("mini-swe-agent", tmp_path / "m", "*.traj.json") in default_roots()
