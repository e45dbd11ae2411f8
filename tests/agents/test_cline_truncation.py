"""Cline's send-time cut of a long tool result, as it sent it: the real CLI (pinned) runs ``ls``
in a project of 400 files (an output of ~18k characters). The session file stores the result
whole; the request after it carried its head and tail around ``...[truncated N chars]...``
(Cline's message builder, ``cline_wire``). The session, imported, rebuilds that request as sent.
Written at test time in a temporary HOME and never kept."""

from __future__ import annotations

import glob
import json

import pytest

from replayer.core.agents import capture
from replayer.core.agents.registry import AGENTS
from replayer.core.agents.run import run
from replayer.core.agents.stub_model import ModelServer
from replayer.core.session.formats import cline_wire
from replayer.core.session.turns import load_turns

from agents import wire
from agents.conftest import agent_binary

pytestmark = pytest.mark.agents

FILES = 400


@pytest.fixture(scope="module")
def cline_long_result(tmp_path_factory):
    a = AGENTS["cline"]
    home = tmp_path_factory.mktemp("home-cline-long")
    project = home / "project"
    project.mkdir()
    for k in range(FILES):
        (project / f"file_with_a_rather_long_name_number_{k:05d}.txt").write_text("x")
    with ModelServer(str(project / "file_with_a_rather_long_name_number_00000.txt")) as m:
        for args in (a.prepare(m.url), a.prompt("TOOL: list the files here")):
            r = run(a, agent_binary(a), args, home=home, project=project, url=m.url)
            assert r.returncode == 0, r.stderr[-300:]
        log = m.log
    [f] = glob.glob(str(home / a.sessions))
    return a, f, [q for q in log if q.body.get("tools")]


def _stored_result(f: str) -> list:
    doc = json.loads(open(f).read())
    return next(b["content"] for m in doc["messages"] if isinstance(m.get("content"), list)
                for b in m["content"] if b.get("type") == "tool_result")


def test_the_file_stores_the_result_whole_and_the_request_carried_it_cut(cline_long_result):
    _, f, main = cline_long_result
    [entry] = _stored_result(f)
    stored = entry["result"]
    assert len(stored) > cline_wire.MAX_TOOL_RESULT_CHARS and "truncated" not in stored
    assert stored.count(".txt\n") == FILES
    sent = json.loads(wire.from_chat(main[1].body).messages[-1]["text"])[0]["result"]
    assert "...[truncated " in sent and len(sent) <= cline_wire.MAX_TOOL_RESULT_CHARS
    head, tail = sent.split("\n\n...[truncated ")
    omitted = int(tail.split(" chars]", 1)[0])
    tail = tail.split(" chars]...\n\n", 1)[1]
    assert stored.startswith(head) and stored.endswith(tail) and len(head) + omitted + len(tail) == len(stored)


def test_every_request_is_rebuilt_as_sent_with_the_result_cut_as_cline_cut_it(cline_long_result):
    a, f, main = cline_long_result
    capture.save(capture.from_request(a.name, a.version, a.api, main[0].body))
    turns = load_turns(f).turns[:-1]
    assert len(turns) == len(main) == 2
    for t, q in zip(turns, main):
        assert wire.diff(wire.from_chat(t.body), wire.FROM[a.api](q.body)) == []
