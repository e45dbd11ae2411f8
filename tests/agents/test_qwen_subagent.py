"""Qwen Code's subagents as it sent them: the real CLI (pinned) runs a prompt the stub model
answers with its ``agent`` tool (the general-purpose type, ``run_in_background: false`` so the
result comes back inline and the parent waits for it). The subagent sends its own request to
the same server — its own system prompt (a general-purpose subagent's) and 17 tools — and
writes its own transcript, ``<project>/subagents/<session>/agent-general-purpose-<call>.jsonl``.
The parent's chat, imported, holds the parent's requests as sent (with a capture of the run:
prompt, tools and the send-time reminders) and the subagent's request as its own thread
between them. The subagent's transcript holds its task and reply only: what was sent around
it is not in it (asserted, and said in a warning); a capture that ran a subagent too supplies
it, and the subagent's thread is then rebuilt as sent. Written at test time in a temporary HOME."""

from __future__ import annotations

import glob
from pathlib import Path

import pytest

from replayer.core.agents import capture
from replayer.core.agents.registry import AGENTS
from replayer.core.session.turns import MAIN, load_turns, thread_of

from agents import wire
from agents.conftest import run_subagent

pytestmark = pytest.mark.agents

PROMPT = "SUBAGENT: have a helper look around"
SUBAGENT_PROMPT = "You are a general-purpose subagent"


@pytest.fixture(scope="module")
def qwen_subagent(tmp_path_factory):
    agent = AGENTS["qwen"]
    home = tmp_path_factory.mktemp("home-qwen-sub")
    log = run_subagent(agent, home)
    [parent] = glob.glob(str(home / agent.sessions))
    [sub] = glob.glob(str(home / ".qwen/projects/*/subagents/*/agent-*.jsonl"))
    main, other = wire.main_thread(agent, log)
    subs = [q for q in other if (wire.from_chat(q.body).system or "").startswith(SUBAGENT_PROMPT)]
    return agent, log, parent, sub, main, subs


def _capture_of_the_run(agent, body: dict) -> None:
    """The run's own first request as a capture: prompt, tools and the parts before the prompt."""
    cap = capture.from_request(agent.name, agent.version, agent.api, body)
    cap.first_user_prefix = capture.prefix_parts(body, PROMPT)
    capture.save(cap)


def test_the_parents_requests_are_rebuilt_as_sent(qwen_subagent):
    agent, _, parent, _, main, _ = qwen_subagent
    _capture_of_the_run(agent, main[0].body)
    st = load_turns(parent)
    turns = [t for t in st.turns[:-1] if thread_of(t) == MAIN]
    assert len(turns) == len(main) == 2
    for t, q in zip(turns, main):
        assert wire.diff(wire.from_chat(t.body), wire.FROM[agent.api](q.body)) == []
    call = wire.from_chat(turns[1].body).messages[-2]["calls"][0]
    assert call["name"] == "agent" and call["args"]["run_in_background"] is False


def test_the_subagents_request_is_its_own_thread_between_the_parents(qwen_subagent):
    agent, log, parent, sub, main, subs = qwen_subagent
    assert len(subs) == 1
    ids = {id(q): MAIN for q in main} | {id(q): "sub" for q in subs}
    order = [ids[id(q)] for q in log if id(q) in ids]
    st = load_turns(parent)
    got = [MAIN if thread_of(t) == MAIN else "sub" for t in st.turns[:-1]]
    assert got == order == [MAIN, "sub", MAIN]
    assert {thread_of(t) for t in st.turns} == {MAIN, Path(sub).stem}
    assert any("per-agent files" in n for n in st.notes)


def test_the_subagents_transcript_holds_its_task_not_what_was_sent_around_it(qwen_subagent):
    """Its one request: the same task and (once answered) reply, but the request also carried the
    skills listing and environment ``<system-reminder>`` parts before the task, a prompt of its
    own and 17 tools, none of them in the transcript; a capture without the subagent's request
    leaves them missing (the main agent's is not put on it), and says so."""
    agent, _, _, sub, main, subs = qwen_subagent
    _capture_of_the_run(agent, main[0].body)
    st = load_turns(sub)
    [turn] = st.turns[:-1]
    rebuilt, sent = wire.from_chat(turn.body), wire.FROM[agent.api](subs[0].body)
    assert [m["role"] for m in rebuilt.messages] == [m["role"] for m in sent.messages] == ["user"]
    task = rebuilt.messages[0]["text"]
    assert task == "list the files" and sent.messages[0]["text"].endswith("\n" + task)
    assert "<system-reminder>" in sent.messages[0]["text"] and "<system-reminder>" not in task
    assert rebuilt.system is None and rebuilt.tools == []
    assert sent.system.startswith(SUBAGENT_PROMPT) and len(sent.tools) == 17
    assert st.session.subagent_type == "general-purpose"
    assert any("subagent's transcript" in w for w in st.session.warnings)
    assert any("subagent's prompt and tools (general-purpose) are not captured" in n for n in st.request.notes)


def test_the_subagents_thread_is_rebuilt_as_sent_with_a_capture_of_its_type(qwen_subagent):
    """``replayer agents capture qwen`` (another HOME, the same project folder) runs a subagent
    too and keeps its request by the type its file records: the subagent's prompt, its 17 tools
    and the parts before its task, with the session's own HOME, project and date. With it the
    subagent's file, and its thread in the parent's session, rebuild the request as sent."""
    from replayer.core.agents.capture_run import capture_agent

    from agents.conftest import agent_binary

    agent, _, parent, sub, _, subs = qwen_subagent
    project = Path(parent).parents[4] / "project"  # HOME/.qwen/projects/<slug>/chats/<id>.jsonl
    cap, _ = capture_agent(agent.name, binary=str(agent_binary(agent)), project=str(project))
    assert set(cap.subagents) == {"general-purpose"} and cap.home not in sub
    own = cap.subagents["general-purpose"]
    assert own["system_prompt"].startswith(SUBAGENT_PROMPT) and len(own["tools"]) == 17
    assert own["first_user_prefix"] and all("<system-reminder>" in p for p in own["first_user_prefix"])
    st = load_turns(sub)
    [turn] = st.turns[:-1]
    assert wire.diff(wire.from_chat(turn.body), wire.FROM[agent.api](subs[0].body)) == []
    assert any("general-purpose subagent's system prompt, 17 tools" in n for n in st.request.notes)
    threaded = [t for t in load_turns(parent).turns[:-1] if thread_of(t) != MAIN]
    assert len(threaded) == 1
    assert wire.diff(wire.from_chat(threaded[0].body), wire.FROM[agent.api](subs[0].body)) == []
