"""Gemini CLI's subagents as it sent them: the real CLI (pinned) runs a prompt the stub model
answers with its ``invoke_agent`` tool (the ``generalist`` subagent), and the subagent, given a
``complete_task`` tool it must end with, calls it at once. The subagent sends its request to
the same server with a system prompt and tools of its own and writes its own chat,
``chats/<parent session id>/<subagent session id>.jsonl``, which holds its task and reply only.
The parent's chat, imported, holds the parent's requests as sent (with a capture of the run) and
the subagent's request as its own thread between them; a capture that ran a subagent too
supplies the subagent's prompt and tools, and its thread is then rebuilt as sent. Written at
test time in a temporary HOME."""

from __future__ import annotations

import glob
from pathlib import Path

import pytest

from replayer.core.agents import capture
from replayer.core.agents.registry import AGENTS
from replayer.core.session.turns import MAIN, load_turns, thread_of

from agents import wire
from agents.conftest import agent_binary, run_subagent

pytestmark = pytest.mark.agents


@pytest.fixture(scope="module")
def gemini_subagent(tmp_path_factory):
    agent = AGENTS["gemini"]
    home = tmp_path_factory.mktemp("home-gemini-sub")
    log = run_subagent(agent, home)
    [parent] = glob.glob(str(home / agent.sessions))
    [sub] = glob.glob(str(home / agent.subagents_own))
    main, other = wire.main_thread(agent, log)
    own = wire.from_gemini(main[0].body).system
    subs = [q for q in other if q.body.get("tools") and wire.from_gemini(q.body).system != own]
    return agent, log, parent, sub, main, subs


def test_the_parents_requests_are_rebuilt_as_sent(gemini_subagent):
    agent, _, parent, _, main, _ = gemini_subagent
    capture.save(capture.from_request(agent.name, agent.version, agent.api, main[0].body))
    turns = [t for t in load_turns(parent).turns[:-1] if thread_of(t) == MAIN]
    assert len(turns) == len(main) == 2
    for t, q in zip(turns, main):
        assert wire.diff(wire.from_chat(t.body), wire.from_gemini(q.body)) == []
    assert wire.from_chat(turns[1].body).messages[-2]["calls"][0]["name"] == "invoke_agent"


def test_the_subagents_request_is_its_own_thread_between_the_parents(gemini_subagent):
    agent, log, parent, sub, main, subs = gemini_subagent
    assert len(subs) == 1
    ids = {id(q): MAIN for q in main} | {id(q): "sub" for q in subs}
    order = [ids[id(q)] for q in log if id(q) in ids]
    st = load_turns(parent)
    got = [MAIN if thread_of(t) == MAIN else "sub" for t in st.turns[:-1]]
    assert got == order == [MAIN, "sub", MAIN]
    assert {thread_of(t) for t in st.turns} == {MAIN, Path(sub).stem}


def test_the_subagents_chat_is_rebuilt_as_sent_with_a_capture_that_ran_a_subagent(gemini_subagent, tmp_path):
    """Without the subagent's own prompt and tools its request is not the one sent (a note says
    so: the main agent's capture is not put on it); ``capture_agent`` runs a subagent too, in its
    own HOME (in the session's project: the subagent's prompt lists its files), and with that capture the subagent's request is rebuilt as sent."""
    from replayer.core.agents.capture_run import capture_agent

    agent, _, parent, sub, main, subs = gemini_subagent
    capture.save(capture.from_request(agent.name, agent.version, agent.api, main[0].body))
    st = load_turns(sub)
    assert st.session.format_version == "subagent"
    assert wire.diff(wire.from_chat(st.turns[0].body), wire.from_gemini(subs[0].body)) != []
    assert any("not captured" in n for n in st.request.notes)
    # the subagent's prompt lists the project's files: captured in the session's project (as
    # `replayer agents capture gemini --project DIR`), in a HOME of its own
    cap, _ = capture_agent("gemini", binary=str(agent_binary(agent)), project=str(Path(parent).parents[4] / "project"))
    assert "" in cap.subagents and cap.subagents[""]["system_prompt"] != cap.system_prompt
    st = load_turns(sub)
    assert len(st.turns[:-1]) == len(subs) == 1
    assert wire.diff(wire.from_chat(st.turns[0].body), wire.from_gemini(subs[0].body)) == []

