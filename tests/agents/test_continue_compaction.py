"""Continue's automatic compaction, headless: what its file keeps is what it sends after.

``cn`` compacts on its own when a request would pass the model's context length less its reply
and a buffer (``shouldAutoCompact``); the config gives the stub model a 4,000-token context. It
then sends the history to be summarised, replaces the whole history with one assistant message
holding the reply (``conversationSummary``), sends that message alone to continue, and adds a
"continue" prompt (measured with the stub, which answers every request with the same text). The file keeps only the history from the summary on: the requests before
it are in no file. Every request sent after it that ends with a user message is a turn, in
order, rebuilt as sent. (``cn -p --resume /compact`` sends the summarization request too but,
headless, saves nothing of it: the next ``--resume`` sends the whole history again, which the
importer reads as it is.)"""

from __future__ import annotations

import glob

import pytest

from replayer.core.agents import capture
from replayer.core.agents.registry import AGENTS
from replayer.core.agents.run import run
from replayer.core.agents.stub_model import ModelServer
from replayer.core.session.turns import load_turns

from agents.conftest import agent_binary
from agents import wire

pytestmark = pytest.mark.agents

def test_after_an_automatic_compaction_every_request_ending_in_a_prompt_is_a_turn(tmp_path):
    agent = AGENTS["continue"]
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir(), project.mkdir()
    (project / "hello.txt").write_text("hello\n")
    binary = agent_binary(agent)
    with ModelServer(str(project / "hello.txt")) as m:
        agent.setup(home, m.url)
        cfg = home / ".continue" / "config.yaml"
        cfg.write_text(cfg.read_text() + "    defaultCompletionOptions:\n      contextLength: 4000\n      maxTokens: 500\n")
        long = " ".join(f"word{i}" for i in range(700))
        for args in (agent.prompt(f"TOOL: list the files here. {long}"),
                     agent.resume("thanks " + " ".join(f"more{i}" for i in range(500))), agent.resume("and more")):
            r = run(agent, binary, args, home=home, project=project, url=m.url)
            assert r.returncode == 0, r.stderr[-300:]
        log = m.log
    [f] = glob.glob(str(home / agent.sessions))
    bodies = [q.body for q in log]
    capture.save(capture.from_request(agent.name, agent.version, agent.api, bodies[0]))
    st = load_turns(f)
    s = st.session
    assert s.stats.compactions_applied == 1 and any("compaction" in w for w in s.warnings)
    assert s.messages[0].role == "assistant" and s.compacted_prefix == 1
    summary = s.messages[0].content
    # the first request that starts from the summary: the one sent to continue after it
    first = next(k for k, b in enumerate(bodies) if b["messages"][1]["role"] == "assistant"
                 and b["messages"][1]["content"] == summary)
    assert first >= 3 and all("TOOL" not in str(b["messages"]) for b in bodies[first:])
    after = [wire.from_chat(b) for b in bodies[first:] if b["messages"][-1]["role"] == "user"]
    turns = [wire.from_chat(t.body) for t in st.turns[:-1]]  # the last: the next request, not sent
    assert len(turns) == len(after) >= 2
    diffs = {k: d for k, (a, b) in enumerate(zip(turns, after)) if (d := wire.diff(a, b))}
    assert not diffs, diffs
