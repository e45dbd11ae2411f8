"""Codex's subagents as it sent them: the real CLI (pinned) runs a prompt the stub model answers
with ``spawn_agent`` of its ``multi_agent_v1`` namespace tool, then ``wait_agent`` on the agent
it started (else ``codex exec`` ends the turn and shuts the subagent down before it answers).
The subagent writes a rollout of its own (``session_meta.parent_thread_id`` = the parent's id)
and sends its requests to the same server, each naming its thread in ``client_metadata``. Each
rollout rebuilds its own thread's requests as sent (messages, system prompt and tools); the
parent's rollout, imported, also holds the subagent's requests as their own thread between the
parent's turns. The rollouts are written at test time in a temporary HOME and never kept."""

from __future__ import annotations

import glob
import json

import pytest

from replayer.core.agents import capture
from replayer.core.agents.registry import AGENTS
from replayer.core.session.turns import MAIN, load_turns, thread_of

from agents import wire
from agents.conftest import run_subagent

pytestmark = pytest.mark.agents


def _thread(q) -> str:
    return str((q.body.get("client_metadata") or {}).get("thread_id"))


@pytest.fixture(scope="module")
def codex_subagent(tmp_path_factory):
    agent = AGENTS["codex"]
    home = tmp_path_factory.mktemp("home-codex-sub")
    log = run_subagent(agent, home)
    files = glob.glob(str(home / agent.sessions))
    metas = {f: json.loads(open(f).readline())["payload"] for f in files}
    [parent] = [f for f, m in metas.items() if not m.get("parent_thread_id")]
    [child] = [f for f, m in metas.items() if m.get("parent_thread_id")]
    assert metas[child]["parent_thread_id"] == metas[parent]["id"]
    return agent, log, parent, child, metas[parent]["id"], metas[child]["id"]


def test_the_parent_spawned_a_subagent_that_wrote_its_own_rollout(codex_subagent):
    _, log, parent, _, pid, cid = codex_subagent
    assert {_thread(q) for q in log} == {pid, cid}
    last = [q for q in log if _thread(q) == pid][-1]
    sent_calls = [it for it in last.body["input"] if it.get("type") == "function_call"]
    assert [(c["namespace"], c["name"]) for c in sent_calls] == [("multi_agent_v1", "spawn_agent"),
                                                                  ("multi_agent_v1", "wait_agent")]
    # the subagent's requests offer no multi_agent_v1 namespace tool (depth 1 of 1)
    assert all("multi_agent_v1" not in [t.get("name") for t in q.body["tools"]] for q in log if _thread(q) == cid)


@pytest.mark.parametrize("which", ["parent", "subagent"])
def test_each_rollout_rebuilds_its_threads_requests_as_sent(codex_subagent, which):
    agent, log, parent, child, pid, cid = codex_subagent
    f, tid = (parent, pid) if which == "parent" else (child, cid)
    sent = [q for q in log if _thread(q) == tid]
    capture.save(capture.from_request(agent.name, agent.version, agent.api, sent[0].body))
    turns = [t for t in load_turns(f).turns[:-1] if thread_of(t) == MAIN]  # its own thread
    assert len(turns) == len(sent) >= (3 if which == "parent" else 1)
    for t, q in zip(turns, sent):
        assert wire.diff(wire.from_chat(t.body), wire.FROM[agent.api](q.body)) == [], f


def test_the_parents_rollout_holds_the_subagents_requests_as_their_own_thread(codex_subagent):
    """In the order the stub received them: each subagent request after as many parent requests
    as reached the stub before it, one either way (the parent's ``wait_agent`` request races the
    subagent's first)."""
    agent, log, parent, _, pid, cid = codex_subagent
    order = [MAIN if _thread(q) == pid else cid for q in log]
    st = load_turns(parent)
    got = [thread_of(t) for t in st.turns[:-1]]
    assert sorted(got) == sorted(order) and got[0] == MAIN and got[-1] == MAIN
    subs = [k for k, x in enumerate(got) if x == cid]
    want = [k for k, x in enumerate(order) if x == cid]
    assert all(abs(a - b) <= 1 for a, b in zip(subs, want))
    sub_sent = [q for q in log if _thread(q) == cid]
    for t, q in zip([t for t in st.turns if thread_of(t) == cid], sub_sent):
        assert [d for d in wire.diff(wire.from_chat(t.body), wire.FROM[agent.api](q.body))
                if d.startswith("message")] == []
    assert any("subagents' rollouts" in n for n in st.notes)
