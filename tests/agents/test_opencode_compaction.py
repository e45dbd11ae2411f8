"""OpenCode's compaction as it sent it: the real CLI (pinned) compacts headless by itself when the
last response's tokens pass the model's usable context (its ``/compact`` is a TUI and ACP command:
``opencode run --command compact`` fails with "Unexpected server error", no command of that name).
The model's ``limit`` in the config (context 150, output 100: 50 usable) makes the stub's 110
tokens a response overflow; the stub reports 10 prompt tokens for a request that starts from the
summary, as a real model's count drops after a compaction (else OpenCode compacts again after
every reply). OpenCode then sends a summarization request (no tools, its own prompt), stores the
summary as an assistant message with ``summary: true`` answering the compaction's user message,
adds a synthetic "Continue if you have next steps…" prompt and goes on from
"What did we do so far?", the summary, the recent turns it kept (``tail_start_id``, with
``compaction.tail_turns``) and what follows. The database, imported, makes every request of the
conversation a turn, in order, each rebuilt as sent: those before the compaction from the
messages before it (``Session.earlier``), its summarization request (the history serialized
into OpenCode's prompt, its compaction agent's system prompt, no tools: a turn of the
``compaction`` thread), then those after it. The manual compaction, headless:
``opencode serve`` and its ``POST /session/{id}/summarize`` (``auto: false``; the endpoint
OpenCode's ACP handler calls for ``/compact``), no "Continue…" prompt after it. Written at test
time in a temporary HOME and never kept."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import sqlite3
import subprocess
import time
import urllib.request

import pytest

from replayer.core.agents import capture
from replayer.core.agents.registry import AGENTS
from replayer.core.agents.run import environment, reap, run
from replayer.core.agents.stub_model import ModelServer
from replayer.core.session.turns import earlier_turns, load_turns

from agents import wire
from agents.conftest import agent_binary

pytestmark = pytest.mark.agents

SUMMARY_PROMPT = "What did we do so far?"  # the compaction's user message, as OpenCode sends it
SUMMARIZE = "Here is the conversation so far:"  # how its summarization request begins


def _first_text(content) -> str:
    """A message's text, or its first text part's (Kilo sends its environment details as a second)."""
    if isinstance(content, list):
        return next((str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text"), "")
    return str(content or "")


def _tokens(body: dict) -> int:
    """A request from the summary on is small; every other one large (110 tokens with the reply)."""
    return 10 if any(_first_text(m.get("content")) == SUMMARY_PROMPT for m in body.get("messages") or []) else 100


#: each agent's config file under HOME, as the registry's setup writes it (Kilo: OpenCode's keys)
CONFIG = {"opencode": ".config/opencode/opencode.json", "kilo": ".config/kilo/kilo.json"}


def _limited(agent, tail_turns: int | None):
    """OpenCode (or Kilo) with a model whose usable context is 50 tokens (and, when given, the
    number of recent turns a compaction keeps), written after the registry's own config."""

    def setup(home, url):
        env = agent.setup(home, url)
        cfg = home / CONFIG[agent.name]
        doc = json.loads(cfg.read_text())
        doc["provider"]["stub"]["models"]["scripted"]["limit"] = {"context": 150, "output": 100}
        if tail_turns is not None:
            doc["compaction"] = {"tail_turns": tail_turns}
        cfg.write_text(json.dumps(doc))
        return env

    return dataclasses.replace(agent, setup=setup)


def _is_summarization(q) -> bool:
    msgs = q.body.get("messages") or []
    return not q.body.get("tools") and len(msgs) == 2 and str(msgs[-1].get("content", "")).startswith(SUMMARIZE)


def _http(method: str, url: str, body: dict | None = None):
    req = urllib.request.Request(url, method=method, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read() or b"null")


def _summarize(agent, home, project, url: str) -> None:
    """The last session compacted on request: ``opencode serve`` (``kilo serve``) in the run's HOME
    and project, then ``POST /session/{id}/summarize`` (answered once the summary is written); the
    server and whatever it started are killed after."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    p = subprocess.Popen([str(agent_binary(agent)), "serve", "--port", str(port)], cwd=project,
                         env=environment(agent, home, url), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(240):
            try:
                sessions = _http("GET", f"{base}/session?directory={project}")
                break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("opencode serve did not answer within 120 s")
        [session] = sessions
        assert _http("POST", f"{base}/session/{session['id']}/summarize?directory={project}",
                     {"providerID": "stub", "modelID": "scripted", "auto": False}) is True
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        reap(home)


SCENARIOS = {  # name: [(tail_turns or None when the model has no limit, args)]
    "before a turn": [("off", ["run", "TOOL: list the files here"]), (None, ["run", "-c", "after the compaction"]),
                      ("off", ["run", "-c", "thanks"])],
    "before a turn, keeping the last turn": [("off", ["run", "TOOL: list the files here"]),
                                             (1, ["run", "-c", "after the compaction"]),
                                             ("off", ["run", "-c", "thanks"])],
    "within a turn": [(None, ["run", "TOOL: list the files here"]), ("off", ["run", "-c", "thanks"])],
    "on request": [("off", ["run", "TOOL: list the files here"]), ("off", "summarize"),
                   ("off", ["run", "-c", "after the compaction"])],
}


def _expected(name: str, scenario: str) -> tuple[bool, bool]:
    """Whether the compaction keeps a tail (``tail_start_id``) and whether a "Continue…" prompt
    follows it. Kilo 7.7.7 differs from OpenCode here (measured, the cause not traced in its
    bundle): with ``compaction.tail_turns: 1`` it kept no tail, and after a compaction before a turn
    it sent no "Continue…" prompt; every request is rebuilt as sent either way."""
    tail = scenario.endswith("the last turn") and name == "opencode"
    return tail, scenario != "on request" and (name == "opencode" or scenario == "within a turn")


@pytest.mark.parametrize("name", sorted(CONFIG))
@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_opencode_every_request_of_an_automatically_compacted_session_is_a_turn_rebuilt_as_sent(scenario, name,
                                                                                                  tmp_path):
    agent = AGENTS[name]
    home, project = tmp_path / "home", tmp_path / "project"
    home.mkdir(), project.mkdir()
    (project / "hello.txt").write_text("hello\n")
    with ModelServer(str(project / "hello.txt"), prompt_tokens=_tokens) as m:
        for tail, args in SCENARIOS[scenario]:
            if args == "summarize":
                _summarize(agent, home, project, m.url)
                continue
            a = agent if tail == "off" else _limited(agent, tail)
            r = run(a, agent_binary(agent), args, home=home, project=project, url=m.url)
            assert r.returncode == 0, r.stderr[-300:]
        log = m.log
    db = home / agent.sessions
    [at] = [k for k, q in enumerate(log) if _is_summarization(q)]
    main = [q for q in log if q.body.get("tools")]  # the title and summarization requests have none
    n_before = sum(1 for q in log[:at] if q.body.get("tools"))
    con = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
    compactions = [json.loads(d) for (d,) in con.execute("select data from part") if '"compaction"' in d]
    con.close()
    assert [c.get("type") for c in compactions] == ["compaction"]
    assert compactions[0]["auto"] is (scenario != "on request")
    keeps_tail, continues = _expected(name, scenario)
    assert ("tail_start_id" in compactions[0]) == keeps_tail
    # a capture of the run: prompt and tools from its first request, the summarization prompt and
    # the compaction agent's own system prompt from its summarization request
    cap = capture.from_request(agent.name, agent.version, agent.api, main[0].body)
    cap.compaction = capture.compaction_of(agent.name, agent.api, log[at].body, main[0].body)
    assert (cap.compaction["system"], cap.compaction["tools"]) == ("own", "none")
    capture.save(cap)
    st = load_turns(db)
    assert st.session.stats.compactions_total == 1 == st.session.stats.compactions_applied
    sent = st.turns[:-1]  # the last is the resume request, not yet sent
    # every request but the titles, in order, the summarization one on the compaction's thread
    # where it was sent: the history serialized into its prompt as OpenCode writes it
    # (Kilo's summarization request, an "anchored summary" of its own, is not rebuilt: a note says so)
    rebuilt = name == "opencode"
    every = [q for k, q in enumerate(log) if q.body.get("tools") or (k == at and rebuilt)]
    assert len(sent) == len(every) and sum(map(len, earlier_turns(st.session))) == n_before + rebuilt
    assert [t.thread for t in sent] == [None] * n_before + ["compaction"] * rebuilt + [None] * (len(main) - n_before)
    diffs = {k: d for k, (t, q) in enumerate(zip(sent, every))
             if (d := wire.diff(wire.from_chat(t.body), wire.FROM[agent.api](q.body)))}
    assert not diffs, diffs
    sent = [t for t in sent if t.thread != "compaction"]
    # the first request after the compaction starts from its prompt and the summary, no tool round
    first = wire.from_chat(sent[n_before].body).messages
    # (Kilo: its environment details after it, as after every user message)
    assert first[0]["text"].partition("<environment_details>")[0].rstrip() == SUMMARY_PROMPT
    assert first[1]["role"] == "assistant"
    assert not any(x["role"] == "tool" for x in first)
    # OpenCode adds its "Continue…" prompt after an automatic compaction only
    assert any(x["text"].startswith("Continue if you have next steps") for x in first) is continues
    assert any(("1 of them the summarization request (thread 'compaction')" if rebuilt
                else "summarization request(s) are not rebuilt") in n for n in st.notes), st.notes
