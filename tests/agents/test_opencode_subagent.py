"""OpenCode's subagents as it sent them, and Kilo's (its fork, the same tables): the real CLI (pinned) runs a prompt the stub model answers
with its task tool, which starts a child session (``parent_id``); the database, imported, holds
the child's requests as their own thread between the parent's turns, in the order the stub
received them, each rebuilt as it was sent. The database is written at test time in a
temporary HOME and never kept."""

from __future__ import annotations

import sqlite3

import pytest

from replayer.core.agents.registry import AGENTS
from replayer.core.server.traffic import MAIN
from replayer.core.session.turns import load_turns, thread_of

from agents import wire
from agents.conftest import run_subagent

pytestmark = pytest.mark.agents


@pytest.fixture(scope="module", params=["opencode", "kilo"])
def opencode_subagent(tmp_path_factory, request):
    agent = AGENTS[request.param]
    home = tmp_path_factory.mktemp(f"home-{agent.name}-sub")
    log = run_subagent(agent, home)
    db = home / agent.sessions
    parent, other = wire.main_thread(agent, log)
    main_ids = {id(q) for q in parent}
    sub = [q for q in other if q.body.get("tools")]  # the title request has none
    order = [MAIN if id(q) in main_ids else "sub" for q in log if id(q) in main_ids | {id(q) for q in sub}]
    return agent, db, order, sub


def test_the_task_tool_made_a_child_session(opencode_subagent):
    _, db, _, sub = opencode_subagent
    con = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
    rows = con.execute("select id, parent_id from session").fetchall()
    con.close()
    assert len(rows) == 2 and sum(1 for _, p in rows if p) == 1 and sub


def test_the_child_sessions_requests_are_their_own_thread_between_the_parents(opencode_subagent):
    agent, db, order, sub_sent = opencode_subagent
    st = load_turns(db)
    sent_turns = st.turns[:-1]  # the last is the resume request
    got = [MAIN if thread_of(t) == MAIN else "sub" for t in sent_turns]
    assert got == order and "sub" in got and got[0] == MAIN and got[-1] == MAIN
    subs = [t for t in sent_turns if thread_of(t) != MAIN]
    assert len({thread_of(t) for t in subs}) == 1 and thread_of(subs[0]).startswith("ses_")
    for t, q in zip(subs, sub_sent):  # each child request rebuilt as it was sent
        assert [d for d in wire.diff(wire.from_chat(t.body), wire.FROM[agent.api](q.body))
                if d.startswith("message")] == []
    assert any("from the child sessions" in n for n in st.notes)
