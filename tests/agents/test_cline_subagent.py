"""Cline's subagents as it sent them: the real CLI (pinned) runs a prompt the stub model answers
with its ``spawn_agent`` tool (a ``systemPrompt`` and a ``task``). The subagent sends its own
request to the same server — the call's ``systemPrompt`` as its whole system prompt, the task as
its prompt, 7 tools (the parent's built-in ones and ``spawn_agent``) — and writes
``agent_<id>.messages.json`` beside the parent's file, with no system prompt. The parent's
session, imported, holds the subagent's request as its own thread between the parent's, in the
order sent; the subagent's file rebuilds its request as sent (its prompt from the parent's call,
its tools from the parent's capture). Written at test time in a temporary HOME."""

from __future__ import annotations

import glob

import pytest

from replayer.core.agents import capture
from replayer.core.agents.registry import AGENTS
from replayer.core.agents.run import run
from replayer.core.agents.stub_model import SUBAGENT_SYSTEM_PROMPT, ModelServer
from replayer.core.session.turns import MAIN, load_turns, thread_of

from agents import wire
from agents.conftest import agent_binary

pytestmark = pytest.mark.agents


@pytest.fixture(scope="module")
def cline_subagent(tmp_path_factory):
    agent = AGENTS["cline"]
    home = tmp_path_factory.mktemp("home-cline-sub")
    project = home / "project"
    project.mkdir()
    (project / "hello.txt").write_text("hello\n")
    with ModelServer(str(project / "hello.txt")) as m:  # Cline's provider is set by its own auth command first
        for args in (agent.prepare(m.url), agent.prompt("SUBAGENT: have a helper look around")):
            r = run(agent, agent_binary(agent), args, home=home, project=project, url=m.url)
            assert r.returncode == 0, r.stderr[-300:]
        log = m.log
    files = glob.glob(str(home / agent.sessions))
    [sub] = [f for f in files if "/agent_" in f]
    [parent] = [f for f in files if f != sub]
    main, other = wire.main_thread(agent, log)
    subs = [q for q in other if wire.from_chat(q.body).system == SUBAGENT_SYSTEM_PROMPT]
    return agent, log, parent, sub, main, subs


def _capture_of_the_parent(agent, main) -> None:
    """The parent's first request as a capture (each test has a capture folder of its own)."""
    capture.save(capture.from_request(agent.name, agent.version, agent.api, main[0].body))


def test_the_subagent_sent_the_calls_prompt_and_task_with_the_parents_built_in_tools(cline_subagent):
    _, _, _, _, main, subs = cline_subagent
    assert len(main) == 2 and len(subs) == 1
    sent, parent = wire.from_chat(subs[0].body), wire.from_chat(main[0].body)
    assert [m["role"] for m in sent.messages] == ["user"] and sent.messages[0]["text"] == "list the files"
    assert sent.tool_defs == parent.tool_defs[:len(sent.tool_defs)] and "spawn_agent" in sent.tools
    assert not any(t.startswith("team_") for t in sent.tools) and any(t.startswith("team_") for t in parent.tools)


def test_the_parents_session_holds_the_subagents_request_as_its_own_thread_in_order(cline_subagent):
    agent, log, parent, sub, main, subs = cline_subagent
    ids = {id(q): MAIN for q in main} | {id(q): "sub" for q in subs}
    order = [ids[id(q)] for q in log if id(q) in ids]
    _capture_of_the_parent(agent, main)
    st = load_turns(parent)
    got = [MAIN if thread_of(t) == MAIN else "sub" for t in st.turns[:-1]]
    assert got == order == [MAIN, "sub", MAIN]
    sent = {MAIN: iter(main), "sub": iter(subs)}
    for t, kind in zip(st.turns[:-1], got):
        assert wire.diff(wire.from_chat(t.body), wire.FROM[agent.api](next(sent[kind]).body)) == [], kind
    assert {thread_of(t) for t in st.turns if thread_of(t) != MAIN} == {sub.rsplit("/", 1)[1].split(".")[0]}
    assert any("per-agent files" in n for n in st.notes)


def test_the_subagents_file_rebuilds_its_request_as_sent(cline_subagent):
    agent, _, _, sub, main, subs = cline_subagent
    _capture_of_the_parent(agent, main)
    st = load_turns(sub)
    [turn] = st.turns[:-1]
    assert st.session.system_prompt == SUBAGENT_SYSTEM_PROMPT and st.session.format_version == "subagent"
    assert wire.diff(wire.from_chat(turn.body), wire.FROM[agent.api](subs[0].body)) == []
    assert any("the ones its subagents are given" in n for n in st.request.notes)
