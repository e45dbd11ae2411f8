"""Codex's compaction as it sent it: the real CLI (pinned) compacts headless when the context
passes ``model_auto_compact_token_limit`` (``codex exec`` sends ``/compact`` to the model as a
plain prompt: it is a TUI command). The stub reports 110 tokens a response, so a limit of 50
compacts at the next check: before a turn (``exec resume`` with the limit) or within one (the
first prompt's tool round with the limit). Codex sends a summarization request (no tools),
writes a ``compacted`` record (its summary message and ``replacement_history``: the developer
items, the environment context, the user prompts so far and the summary as a user message) and
sends every later request from that history. The rollout, imported, makes one turn per request
of the conversation, in order, each rebuilt as sent (messages, system prompt and tools): those
before the compaction from the items it replaced (the rollout keeps them), then those after it
from its replacement history; between them the summarization request (that whole history, then
Codex's summarization prompt as a user message, from ``replayer agents capture codex``; the
conversation's developer items, no tools), a turn of the ``compaction`` thread."""

from __future__ import annotations

import glob
import json

import pytest

from replayer.core.agents import capture
from replayer.core.agents.capture_run import capture_agent
from replayer.core.agents.registry import AGENTS
from replayer.core.agents.run import run
from replayer.core.agents.stub_model import ModelServer
from replayer.core.session.turns import earlier_turns, load_turns

from agents import wire
from agents.conftest import agent_binary

pytestmark = pytest.mark.agents

#: compact as soon as the context holds more than 50 tokens (every stub response reports 110)
LIMIT = ["-c", "model_auto_compact_token_limit=50"]


def _steps(where: str) -> list[list[str]]:
    exec_ = ["exec", "--skip-git-repo-check"]
    if where == "before a turn":
        return [[*exec_, "TOOL: list the files here"], [*exec_, *LIMIT, "resume", "--last", "after the compaction"],
                [*exec_, "resume", "--last", "thanks"]]
    return [[*exec_, *LIMIT, "TOOL: list the files here"], [*exec_, "resume", "--last", "thanks"]]


@pytest.mark.parametrize("where", ["before a turn", "within a turn"])
def test_codex_every_request_of_an_automatically_compacted_session_is_a_turn_rebuilt_as_sent(where, tmp_path):
    agent = AGENTS["codex"]
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir(), project.mkdir()
    (project / "hello.txt").write_text("hello\n")
    with ModelServer(str(project / "hello.txt")) as m:
        for args in _steps(where):
            r = run(agent, agent_binary(agent), args, home=home, project=project, url=m.url)
            assert r.returncode == 0, r.stderr[-300:]
        log = m.log
    [f] = glob.glob(str(home / agent.sessions))
    # the summarization request is the one without tools; the conversation's requests carry them
    [at] = [k for k, q in enumerate(log) if not q.body.get("tools")]
    main = [q for q in log if q.body.get("tools")]
    after = [q for q in log[at + 1:] if q.body.get("tools")]
    assert len(after) == 2 and len(main) > len(after)
    compacted = [json.loads(x)["payload"] for x in open(f) if json.loads(x)["type"] == "compacted"]
    assert len(compacted) == 1 and "Summary: the user asked" in compacted[0]["message"]
    # `replayer agents capture codex` in a HOME and folder of its own: prompt, tools and (from a
    # compaction of its own run) the summarization prompt
    cap, _ = capture_agent(agent.name, binary=str(agent_binary(agent)))
    assert cap.compaction == {"prompt": capture.last_user_text(agent.api, log[at].body), "system": "same",
                              "tools": "none"}
    st = load_turns(f)
    assert st.session.stats.compactions_total == 1
    sent = st.turns[:-1]  # the last is the resume request, not yet sent
    n_before = len(main) - len(after)
    assert sum(map(len, earlier_turns(st.session))) == n_before + 1  # and the summarization request
    # every request of the run, in order, the summarization one on the compaction's thread where it
    # was sent, each rebuilt as sent: messages, system prompt and tools (none for the summarization)
    assert len(sent) == len(log) and [t.thread for t in sent].index("compaction") == at
    diffs = {k: d for k, (t, q) in enumerate(zip(sent, log))
             if (d := wire.diff(wire.from_chat(t.body), wire.FROM[agent.api](q.body)))}
    assert not diffs, diffs
    assert any("1 of them the summarization request (thread 'compaction')" in n for n in st.notes)
    # the first request after the compaction starts from the summary, not the tool round
    first = wire.FROM[agent.api](after[0].body)
    assert not any(x["role"] in ("assistant", "tool") for x in first.messages)
    assert any(x["text"] == compacted[0]["message"] for x in first.messages if x["role"] == "user")
