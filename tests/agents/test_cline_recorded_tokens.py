"""Cline's own counts of each request, as the real CLI (pinned) records them: the stub reports a
scripted ``prompt_tokens`` and ``prompt_tokens_details.cached_tokens`` (where llama-server reports
the tokens it reused) for every request; the session file's ``metrics`` hold them per response
(``inputTokens`` the whole prompt, ``cacheReadTokens`` the cached part), and the imported
session's turns and its session report carry them, request by request. Written at test time in a
temporary HOME and never kept."""

from __future__ import annotations

import glob
import json
import subprocess
import sys

import pytest

from replayer.core.agents.registry import AGENTS
from replayer.core.agents.run import run
from replayer.core.agents.stub_model import ModelServer
from replayer.core.session.turns import load_turns

from agents.conftest import agent_binary
from conftest import REPO

pytestmark = pytest.mark.agents


def _prompt_tokens(body: dict) -> int:
    return 1000 + 37 * len(body.get("messages", ()))


def _cached_tokens(body: dict) -> int:
    """What a server that kept the previous request's prompt would have reused of this one."""
    return _prompt_tokens({"messages": body.get("messages", ())[:-2]}) if len(body.get("messages", ())) > 2 else 0


@pytest.fixture(scope="module")
def cline_counted(tmp_path_factory):
    a = AGENTS["cline"]
    home = tmp_path_factory.mktemp("home-cline-counts")
    project = home / "project"
    project.mkdir()
    (project / "hello.txt").write_text("hello\n")
    with ModelServer(str(project / "hello.txt"), prompt_tokens=_prompt_tokens, cached_tokens=_cached_tokens) as m:
        for args in (a.prepare(m.url), a.prompt("TOOL: list the files here")):
            r = run(a, agent_binary(a), args, home=home, project=project, url=m.url)
            assert r.returncode == 0, r.stderr[-300:]
        log = m.log
    [f] = glob.glob(str(home / a.sessions))
    return f, [q for q in log if q.body.get("tools")]


def test_each_response_carries_the_counts_the_server_reported_for_its_request(cline_counted):
    f, sent = cline_counted
    want = [(_prompt_tokens(q.body), _cached_tokens(q.body)) for q in sent]
    assert len(want) == 2 and want[1][1] > 0  # the tool round: a request that reused the first one's prompt
    doc = json.loads(open(f).read())
    stored = [(m["metrics"]["inputTokens"], m["metrics"]["cacheReadTokens"]) for m in doc["messages"]
              if m["role"] == "assistant" and "metrics" in m]
    assert stored == want  # the field names and their meaning, as 3.0.65 writes them
    turns = load_turns(f).turns[:-1]
    assert [(t.recorded.prompt, t.recorded.reused) for t in turns] == want


def test_the_session_report_sets_them_beside_the_prediction(cline_counted):
    f, sent = cline_counted
    r = subprocess.run([sys.executable, "-m", "replayer.cli", "replay", f, "--mode", "session", "--json"],
                       capture_output=True, text=True, cwd=REPO, timeout=300)
    assert r.returncode == 0, r.stderr
    o = json.loads(r.stdout)["observed"]
    assert o["kind"] == "agent" and o["n_requests"] == len(sent) == 2
    assert [(q["cache_n"], q["cache_n"] + q["prompt_n"]) for q in o["requests"]] == \
        [(_cached_tokens(q.body), _prompt_tokens(q.body)) for q in sent]
    assert all(ag["compared"] == 2 for ag in o["agreement"].values())
