"""A Cline CLI session with a subagent, made up in the CLI's layout (tests/agents/test_cline_subagent.py
holds the real CLI to it): the subagent's file has no system prompt, the parent's ``spawn_agent``
call has it; its tools are the parent capture's built-in ones."""

from __future__ import annotations

import orjson

from replayer.core.agents import capture
from replayer.core.session.formats import cline
from replayer.core.session.turns import MAIN, load_turns, thread_of

ROOT = "1796319548997_0aslj"
SUB = "agent_1796319551002_b2muaa"


def _tool(name: str) -> dict:
    return {"type": "function", "function": {"name": name, "description": name, "parameters": {"type": "object"}}}


def _write(tmp_path, prompts: list[str]) -> tuple:
    d = tmp_path / ROOT
    d.mkdir()
    calls = [{"role": "assistant", "ts": 2000 + k, "content": [{"type": "tool_use", "id": f"c{k}", "name": "spawn_agent",
                                                               "input": {"systemPrompt": p, "task": "list the files"}}]}
             for k, p in enumerate(prompts)]
    results = [{"role": "user", "ts": 4000, "content": [{"type": "tool_result", "tool_use_id": f"c{k}", "content": "ok"}
                                                       for k in range(len(prompts))]}]
    parent = {"version": 1, "agent": "lead", "sessionId": ROOT, "system_prompt": "lead prompt",
              "origin": {"source": "cli", "mode": "user", "version": "3.0.65"},
              "messages": [{"role": "user", "ts": 1000, "content": [{"type": "text", "text": "go"}]}, *calls, *results,
                           {"role": "assistant", "ts": 5000, "content": [{"type": "text", "text": "Done."}]}]}
    sub = {"version": 1, "agent": "subagent", "sessionId": f"{ROOT}__{SUB}",
           "origin": {"source": "cli", "mode": "subagent", "parentThreadId": ROOT, "subagent": SUB, "version": "3.0.65"},
           "messages": [{"role": "user", "ts": 3000, "content": [{"type": "text", "text": "list the files"}]},
                        {"role": "assistant", "ts": 3500, "content": [{"type": "text", "text": "two files"}]}]}
    (d / f"{ROOT}.messages.json").write_bytes(orjson.dumps(parent))
    (d / f"{SUB}.messages.json").write_bytes(orjson.dumps(sub))
    other = {**sub, "origin": {**sub["origin"], "parentThreadId": "someone-else"}}
    (d / "agent_1796319551003_zzzzzz.messages.json").write_bytes(orjson.dumps(other))
    return d / f"{ROOT}.messages.json", d / f"{SUB}.messages.json"


def test_the_subagents_prompt_is_the_parents_call_made_before_it(tmp_path):
    parent, sub = _write(tmp_path, ["You are a helper."])
    s = cline.load(sub)
    assert s.format_version == "subagent" and s.system_prompt == "You are a helper."
    assert cline.subagent_files(parent, ROOT) == [sub] and cline.subagent_files(sub, ROOT) == []


def test_a_subagent_without_its_call_says_its_prompt_is_missing(tmp_path):
    _, sub = _write(tmp_path, [])
    s = cline.load(sub)
    assert s.system_prompt is None and any("spawn_agent call" in w for w in s.warnings)


def test_the_parents_session_holds_the_subagent_thread_with_the_built_in_tools_of_the_capture(tmp_path):
    parent, sub = _write(tmp_path, ["You are a helper."])
    tools = [_tool(n) for n in ("read_files", "run_commands", "spawn_agent", "team_status", "mcp_thing")]
    capture.save(capture.Capture("cline", "3.0.65", "chat", system_prompt="lead prompt", tools=tools))
    st = load_turns(parent)
    threads = [thread_of(t) for t in st.turns[:-1]]
    assert threads == [MAIN, SUB, MAIN]  # the lead's spawn, the subagent, the lead's request after it
    [t] = [t for t in st.turns if thread_of(t) == SUB]
    assert t.body["messages"][0] == {"role": "system", "content": "You are a helper."}
    assert [x["function"]["name"] for x in t.body["tools"]] == ["read_files", "run_commands", "spawn_agent"]
    assert len(st.turns[0].body["tools"]) == 5
