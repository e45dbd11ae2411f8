"""A Qwen Code subagent's transcript rebuilt with a capture of its type, on made-up files
(tests/agents/test_qwen_subagent.py holds the real CLI to it): the transcript stores the task
only; the capture's ``subagents`` entry for the type the file records supplies the prompt, the
tools and the parts before the task, with the session's own HOME and project in place of the
capture run's."""

from __future__ import annotations

import re

import orjson

from replayer.core.agents import capture
from replayer.core.session.turns import load_turns

SID = "59e5f073-5126-40bf-9956-f238e9e54ac4"


def _slug(project) -> str:
    """The project folder as Qwen Code names it: every character not a letter or digit is ``-``."""
    return re.sub(r"[^A-Za-z0-9]", "-", str(project))


def _transcript(home, project) -> object:
    slug = _slug(project)
    d = home / ".qwen" / "projects" / slug / "subagents" / SID
    d.mkdir(parents=True)
    base = {"sessionId": SID, "cwd": str(project), "version": "0.24.4", "agentId": "a1",
            "agentName": "general-purpose", "isSidechain": True}
    recs = [{**base, "uuid": "u1", "parentUuid": None, "type": "user", "timestamp": "2026-12-03T10:00:00Z",
             "message": {"role": "user", "parts": [{"text": "list the files"}]}},
            {**base, "uuid": "u2", "parentUuid": "u1", "type": "assistant", "timestamp": "2026-12-03T10:00:01Z",
             "message": {"role": "model", "parts": [{"text": "two files"}]}}]
    f = d / "agent-general-purpose-call_2.jsonl"
    f.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    return f


def _capture(types: dict) -> None:
    capture.save(capture.Capture("qwen", "0.24.4", "chat", system_prompt="main prompt", tools=[],
                                 project="/tmp/cap/project", home="/tmp/cap", date="2026-12-03", subagents=types))


def test_the_subagent_type_the_file_records_picks_its_capture(tmp_path):
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    f = _transcript(home, project)
    tool = {"type": "function", "function": {"name": "read_file", "description": "read",
                                             "parameters": {"type": "object"}}}
    _capture({"general-purpose": {
        "system_prompt": "You are a general-purpose subagent. Memory: /tmp/cap/.qwen/projects/-tmp-cap-project",
        "tools": [tool], "first_user_prefix": ["<system-reminder>folder /tmp/cap/project</system-reminder>"]}})
    st = load_turns(f)
    assert st.session.subagent_type == "general-purpose"
    body = st.turns[0].body
    slug = _slug(project)
    assert body["messages"][0] == {"role": "system", "content": "You are a general-purpose subagent. Memory: "
                                                                f"{home}/.qwen/projects/{slug}"}
    assert body["messages"][1]["content"] == [{"type": "text", "text": f"<system-reminder>folder {project}</system-reminder>"},
                                              {"type": "text", "text": "list the files"}]
    assert body["tools"] == [tool]


def test_without_a_capture_of_its_type_nothing_of_the_main_agents_is_put_on_it(tmp_path):
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    f = _transcript(home, project)
    _capture({"explore": {"system_prompt": "another type", "tools": [], "first_user_prefix": []}})
    st = load_turns(f)
    body = st.turns[0].body
    assert body["messages"][0] == {"role": "user", "content": "list the files"} and "tools" not in body
    assert any("(general-purpose) are not captured" in n and "has no general-purpose subagent" in n
               for n in st.request.notes)
