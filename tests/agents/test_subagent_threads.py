"""Claude Code's subagent threads as it sent them: the real CLI (pinned) runs a prompt the stub
model answers with its Task tool; the parent's session file, imported, holds the subagent's
requests as their own thread between the main turns, in the order the stub received them.
The transcript is written at test time in a temporary HOME and never kept."""

from __future__ import annotations

import glob
from pathlib import Path

import pytest

from replayer.core.agents.registry import AGENTS
from replayer.core.server.traffic import MAIN, requests_of, thread_counts, thread_of
from replayer.core.session.turns import load_turns

from agents import wire
from agents.conftest import run_subagent

pytestmark = pytest.mark.agents


@pytest.fixture(scope="module")
def claude_subagent(tmp_path_factory):
    agent = AGENTS["claude"]
    home = tmp_path_factory.mktemp("home-claude-sub")
    log = run_subagent(agent, home)
    [parent_file] = glob.glob(str(home / agent.sessions))
    parent, other = wire.main_thread(agent, log)
    main_ids = {id(q) for q in parent}
    sub_ids = {id(q) for q in other if q.body.get("tools")}
    # the order the stub received the conversation requests: main or subagent, side requests left out
    order = [MAIN if id(q) in main_ids else "sub" for q in log if id(q) in main_ids | sub_ids]
    return agent, parent_file, order, [q for q in log if id(q) in sub_ids]


def test_the_subagent_requests_are_their_own_thread_between_the_main_turns(claude_subagent):
    agent, parent_file, order, sub_sent = claude_subagent
    st = load_turns(parent_file)
    sent_turns = st.turns[:-1]  # the last is the resume request
    got = [MAIN if thread_of(t) == MAIN else "sub" for t in sent_turns]
    assert sorted(got) == sorted(order) and "sub" in got
    assert got[0] == MAIN and got[-1] == MAIN  # between the main turns: after the Task call, before the end
    # each subagent request after as many main requests as reached the stub before it; Claude
    # Code 2.1 runs the agent in the background, so the main request sent beside it (the Task
    # call's "launched" result) races it: one either way
    assert all(abs(_mains_before(got, k) - _mains_before(order, k)) <= 1 for k in range(got.count("sub")))
    subs = [t for t in sent_turns if thread_of(t) != MAIN]
    assert len({thread_of(t) for t in subs}) == 1 and thread_of(subs[0]).startswith("agent-")
    for t, q in zip(subs, sub_sent):  # each subagent request rebuilt as it was sent
        assert [d for d in wire.diff(wire.from_chat(t.body), wire.FROM[agent.api](q.body))
                if d.startswith("message")] == []
    assert any("subagent request" in n for n in st.notes)


def _mains_before(order: list[str], k: int) -> int:
    """How many main requests precede the ``k``-th subagent request."""
    at = [i for i, x in enumerate(order) if x == "sub"][k]
    return order[:at].count(MAIN)


def test_the_session_replay_runs_the_subagent_requests_in_place(claude_subagent):
    """The simulated session replay of the parent file, for both builds: one request per
    imported turn, the subagent's between the main ones in the order they were sent; the
    subagent's first request shares nothing with the main prompt before it (another prompt)."""
    from replayer.core import session_replay as sr
    from replayer.core.replay import ReplayConfig

    _, parent_file, order, _ = claude_subagent
    prep = sr.prepare_session(parent_file, ReplayConfig(a="9859", b="10001"))
    for run in ("A", "B"):
        reqs = requests_of(prep.layouts[run].prompts)
        assert [r.thread for r in reqs] == [thread_of(t) for t in load_turns(parent_file).turns]
        assert reqs[0].thread == MAIN and reqs[-2].thread == MAIN and any(r.thread != MAIN for r in reqs[1:-2])
        counts = thread_counts(reqs)
        assert counts[MAIN] == order.count(MAIN) + 1 and sum(counts.values()) == len(order) + 1
        records = sr.simulated_session_run(prep, run).turns
        assert [t.turn for t in records] == [r.prompt.index for r in reqs]
        first_sub = next(k for k, r in enumerate(reqs) if r.thread != MAIN)
        assert records[first_sub].prompt_n > 0


def test_inspect_shows_the_threads_and_their_requests(claude_subagent):
    """``replayer inspect`` (the CLI, text and --json): the main thread and the subagent's, with
    as many requests each as the session replay runs."""
    import json
    import subprocess
    import sys

    _, parent_file, _, _ = claude_subagent
    want: dict[str, int] = {}
    for t in load_turns(parent_file).turns:
        want[thread_of(t)] = want.get(thread_of(t), 0) + 1
    r = subprocess.run([str(Path(sys.executable).with_name("replayer")), "inspect", "--json", parent_file],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-300:]
    info = json.loads(r.stdout)
    assert info["threads"] == want and len(want) == 2 and info["turns"] == sum(want.values())
    r = subprocess.run([str(Path(sys.executable).with_name("replayer")), "inspect", parent_file],
                       capture_output=True, text=True, timeout=120)
    line = next(x for x in r.stdout.splitlines() if x.strip().startswith("threads"))
    assert " ".join(line.split()) == "threads 2: " + ", ".join(f"{k} {v}" for k, v in want.items())
