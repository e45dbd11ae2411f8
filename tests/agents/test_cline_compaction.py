"""Cline's compaction as it sent it: the real CLI (pinned) with a model whose input window is small
compacts by itself (its default ``--compaction agentic``), headless, within one run: it sends a
summarization request of its own, then the next request from the summary. The session, imported,
holds every request of the main thread — the one before the compaction from the stored history,
the ones after it from ``<id>.compaction.json`` — each rebuilt as sent. Written at test time in a
temporary HOME and never kept."""

from __future__ import annotations

import glob
import json

import pytest

from replayer.core.agents import capture
from replayer.core.agents.registry import AGENTS
from replayer.core.agents.run import run
from replayer.core.agents.stub_model import ModelServer
from replayer.core.session.turns import load_turns

from agents import wire
from agents.conftest import agent_binary

pytestmark = pytest.mark.agents

#: Cline compacts when a request's estimate passes 90% of the model's input window (3.0.65's
#: bundle: ``$80=128000`` the default window, ``A7=0.9`` the threshold) and there are at least two
#: messages to fold: a window this small makes it compact before the request after the tool call,
#: yet leaves its summarizer a budget (a window of 1,000 skips: "summarizer budget exhausted")
WINDOW = 7500


@pytest.fixture(scope="module")
def cline_compacted(tmp_path_factory):
    a = AGENTS["cline"]
    home = tmp_path_factory.mktemp("home-cline-compact")
    project = home / "project"
    project.mkdir()
    (project / "hello.txt").write_text("hello\n")
    with ModelServer(str(project / "hello.txt")) as m:
        r = run(a, agent_binary(a), a.prepare(m.url), home=home, project=project, url=m.url)
        assert r.returncode == 0, r.stderr[-300:]
        [providers] = glob.glob(str(home / ".cline/data/settings/providers.json"))
        doc = json.loads(open(providers).read())
        doc["providers"]["openai-compatible"]["settings"]["contextWindow"] = WINDOW  # the provider's own field
        open(providers, "w").write(json.dumps(doc))
        r = run(a, agent_binary(a), a.prompt("TOOL: list the files here"), home=home, project=project, url=m.url)
        assert r.returncode == 0, r.stderr[-300:]
        log = m.log
    [f] = glob.glob(str(home / a.sessions))
    return a, f, log


def test_cline_compacted_by_itself_with_a_summarization_request_between_two_of_its_requests(cline_compacted):
    _, f, log = cline_compacted
    kinds = ["main" if q.body.get("tools") else "summarize" for q in log]
    assert kinds == ["main", "summarize", "main"]
    assert glob.glob(f.replace(".messages.json", ".compaction.json"))
    first = wire.from_chat(log[2].body).messages[0]
    assert first["role"] == "user" and first["text"].startswith("Context summary:")


def test_every_request_of_the_compacted_session_is_a_turn_rebuilt_as_sent(cline_compacted):
    """Before the compaction, the stored history; after it, the summary and what it kept (the
    tool call and its result, which answered the history before it: no turn of them); every
    turn — messages, the stored system prompt, the tools from a capture of the run — is the
    request sent, and the count of turns is that of the main thread's requests."""
    a, f, log = cline_compacted
    main = [q for q in log if q.body.get("tools")]
    capture.save(capture.from_request(a.name, a.version, a.api, main[0].body))
    st = load_turns(f)
    assert st.session.stats.compactions_total == 1 and len(st.session.earlier) == 1
    turns = st.turns[:-1]  # the last is the resume request
    assert len(turns) == len(main) == 2
    diffs = {k: d for k, (t, q) in enumerate(zip(turns, main))
             if (d := wire.diff(wire.from_chat(t.body), wire.FROM[a.api](q.body)))}
    assert not diffs, diffs
    assert any("1 turn(s) are the requests sent before it" in n for n in st.notes)
    assert any("1 response(s) the compaction kept" in n for n in st.notes)
