"""Qwen Code's chat compression as it sent it: the real CLI (pinned) compresses headless on
``qwen -c -p /compress`` (the command's ``supportedModes`` include ``non_interactive``). It
sends the history with a summarization prompt (its own prompt and tools, for the prompt cache),
keeps the summary only when it holds a ``<state_snapshot>`` and saves tokens by the reported
usage (so the stub reports a request's size / 4), and writes a ``system`` record of subtype
``chat_compression`` whose ``compressedHistory`` is the history it sends from then on: the
summary as a user message and a model reply it wrote itself. The chat, imported, makes one turn
per request of the conversation, in order — those before the compression from the records
before it (``Session.earlier``), those after it from ``compressedHistory`` — each rebuilt as sent
(messages with the send-time reminders, system prompt and tools from a capture of the run's first
request); none of the written reply; the summarization request (the history, Qwen Code's own
prompt as its last message, the conversation's prompt and tools) a turn of the ``compaction``
thread where it was sent. Written at test time in a temporary HOME."""

from __future__ import annotations

import glob
import json

import pytest

from replayer.core.agents import capture
from replayer.core.agents.registry import AGENTS
from replayer.core.agents.run import run
from replayer.core.agents.stub_model import ModelServer
from replayer.core.session.turns import earlier_turns, load_turns

from agents import wire
from agents.conftest import agent_binary

pytestmark = pytest.mark.agents

PROMPT, AFTER = "TOOL: list the files here", "after the compression"
SUMMARIZE = "You are the component that summarizes"


def _is_compression(q) -> bool:
    last = (q.body.get("messages") or [{}])[-1]
    return last.get("role") == "user" and wire.from_chat({"messages": [last]}).messages[0]["text"].startswith(SUMMARIZE)


def test_qwen_every_request_of_a_compressed_chat_is_a_turn_rebuilt_as_sent(tmp_path):
    agent = AGENTS["qwen"]
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir(), project.mkdir()
    (project / "hello.txt").write_text("hello\n")
    with ModelServer(str(project / "hello.txt"), usage_by_size=True) as m:
        for args in (agent.prompt(PROMPT), agent.resume("/compress"), agent.resume(AFTER)):
            # Qwen Code takes minutes a prompt on 2 loaded cores
            r = run(agent, agent_binary(agent), args, home=home, project=project, url=m.url, timeout=600)
            assert r.returncode == 0, r.stderr[-300:]
        log = m.log
    [f] = glob.glob(str(home / agent.sessions))
    records = [json.loads(x) for x in open(f)]
    [comp] = [x for x in records if x.get("subtype") == "chat_compression"]
    assert comp["systemPayload"]["info"]["compressionStatus"] == 1  # COMPRESSED
    main, _ = wire.main_thread(agent, log)
    [at] = [k for k, q in enumerate(main) if _is_compression(q)]
    after = main[at + 1:]
    assert len(after) == 1 and at == 2  # the tool round's two requests, the compression, the prompt
    # a capture of the run's first request: prompt, tools, the reminders before the first prompt,
    # and the date reminder (its last part) before the prompt of each later ``-c -p`` run
    cap = capture.from_request(agent.name, agent.version, agent.api, main[0].body)
    cap.first_user_prefix = capture.prefix_parts(main[0].body, PROMPT)
    cap.later_user_prefix = cap.first_user_prefix[-1:]
    assert cap.later_user_prefix[0].startswith("<system-reminder>\nThe current date is")
    # and its summarization prompt, from the run's summarization request (`replayer agents capture
    # qwen` records it from a `-c -p /compress` of its own run): the conversation's prompt and tools
    cap.compaction = capture.compaction_of(agent.name, agent.api, main[at].body, main[0].body)
    assert cap.compaction == {"prompt": capture.last_user_text(agent.api, main[at].body), "system": "same",
                              "tools": "same"}
    capture.save(cap)
    st = load_turns(f)
    assert st.session.stats.compactions_total == 1 == st.session.stats.compactions_applied
    assert st.session.compacted_prefix == 2  # the summary and the reply Qwen Code wrote
    sent = st.turns[:-1]
    # every request, in order, the summarization one on the compaction's thread where it was sent:
    # the whole history (without the date reminder: /compress starts no run of a prompt), its prompt
    assert len(sent) == len(main) and sum(map(len, earlier_turns(st.session))) == at + 1
    assert [t.thread for t in sent] == [None] * at + ["compaction"] + [None] * len(after)
    diffs = {k: d for k, (t, q) in enumerate(zip(sent, main))
             if (d := wire.diff(wire.from_chat(t.body), wire.FROM[agent.api](q.body)))}
    assert not diffs, diffs
    assert any("1 of them the summarization request (thread 'compaction')" in n for n in st.notes)
    first = wire.from_chat(sent[at + 1].body).messages  # the first after the summarization request
    assert "<state_snapshot>" in first[0]["text"] and not any(x["role"] == "tool" for x in first)
