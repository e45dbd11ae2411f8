"""The request conversions checked against the server's own counting, on real builds.

A Messages conversation (13 requests, tool calls and results, a system prompt in blocks) and a
Responses one go through ``replayer record`` to a real llama-server (tiny llama GGUF); each logged
body is also sent to the server's counting endpoint for its API — ``/v1/messages/count_tokens``
(Anthropic), ``/v1/responses/input_tokens`` — which run the server's own conversion, template and
tokenizer without generating (``handle_count_tokens`` in ``tools/server/server-context.cpp``; both
routes are in b9859's ``server.cpp`` already). replayer reads the log as a session and lays each
request out offline (its copy of the server's conversion, the GGUF's template and vocabulary): its
token count of every request is the server's. Run on every build of ``BUILDS`` installed; b11434
is the one the conversions were last checked on.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from replayer.core.builds.catalog import parse_build
from replayer.core.builds.manager import list_builds
from replayer.core.engine.live import LiveOptions, LiveServer
from replayer.core.prompt.turn_layouts import turn_layouts
from replayer.core.runspec import Knobs
from replayer.core.session.turns import load_turns
from replayer.core.tiny_models import make_tiny

from record_fakes import proxy_to
from test_record_live import requests

pytestmark = pytest.mark.live
BUILDS = (11434, 9859)
CTX = 16384
COUNTING = {"/v1/messages": "/v1/messages/count_tokens", "/v1/responses": "/v1/responses/input_tokens"}


def _binary(build: int):
    for r in list_builds():
        if r.build == build and r.backend == "cpu":
            return Path(r.binary)
    pytest.skip(f"b{build} is not installed")


@pytest.mark.parametrize("build", BUILDS)
def test_replayers_token_count_of_each_recorded_request_is_the_servers_count_tokens(build, tmp_path):
    binary = _binary(build)
    model = make_tiny("llama", tmp_path / "llama.gguf")
    log = tmp_path / "traffic.jsonl"
    sent = [(e, b) for e, b in requests() if e in COUNTING]  # 13 Messages, then 13 Responses requests
    with LiveServer(LiveOptions(binary=binary, model=model, ctx_size=CTX), Knobs(), CTX) as server, \
            httpx.Client(timeout=120) as c:
        server.wait_healthy(c)
        with proxy_to(server.url, log) as proxy:
            for endpoint, body in sent:
                r = c.post(f"{proxy.url}{endpoint}", json=body)
                assert r.status_code == 200, r.text[:300]
            lines = proxy.wait_lines(len(sent))
        counted = []
        for x in lines:  # the logged body, as the agent sent it, to the server's counting route
            r = c.post(f"{server.url}{COUNTING[x['endpoint']]}", json=x["body"])
            assert r.status_code == 200, r.text[:300]
            counted.append(r.json()["input_tokens"])
    assert [x["endpoint"] for x in lines] == [e for e, _ in sent]
    assert len(set(counted)) == len(counted)  # a growing conversation: every request counted apart
    st = load_turns(log)
    assert len(st.turns) == len(sent)
    lay = turn_layouts(st.turns, tokenizer=f"gguf:{model}", build=parse_build(build))
    assert [p.n_tokens for p in lay.prompts] == counted
    # and what the server then processed for each request is what it counted (usage of the answer)
    assert [x["cache_n"] + x["prompt_n"] for x in lines] == counted, json.dumps(lines[0]["usage"])
