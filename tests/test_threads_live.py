"""``replay --mode session --engine live --server-args``: the real server in the user's setup,
per request the same slot, ``cache_n``, ``prompt_n`` and batches as the simulated run on the prompts the
server laid out. A short request log on four threads (main, a title request, two subagent bursts) on real
b10001 with a tiny llama, with llama-server's defaults and with ``-np 1 --cache-ram 0``."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from replayer.core import session_replay as sr
from replayer.core.builds import manager
from replayer.core.engine.live import live_processes
from replayer.core.engine.live_session import live_session_events
from replayer.core.replay import ReplayConfig
from replayer.core.server.traffic import agent_stream

from test_live import tiny  # noqa: F401  (the tiny models fixture)

pytestmark = pytest.mark.live
BUILD = 10001


@pytest.fixture(autouse=True)
def no_orphans():
    yield
    assert live_processes() == []


@pytest.mark.parametrize("args", ["", "-np 1 --cache-ram 0"])
def test_live_session_in_the_users_setup_equals_the_simulation(tiny, tmp_path, args):
    bodies = agent_stream(6, burst=3, words=40)  # main 6, title 1, subagents 3 + 3: 13 requests, 4 threads
    log = tmp_path / "threads.jsonl"
    log.write_text("".join(json.dumps(b) + "\n" for b in bodies))
    binary = Path(manager.install(BUILD, "cpu").binary)
    cfg = ReplayConfig(a=str(BUILD), b=str(BUILD), model=str(tiny["llama"]), engine="live")
    prep = sr.prepare_session(log, cfg)
    prep.server_args = args
    live = sr.session_run(prep, "A", list(live_session_events(prep, "A", tiny["llama"], binary=binary,
                                                               server_args=args)))
    assert live.failed is None, live.failed
    # the simulated engine on the server's own prompts (the live run laid them out), the model read from its GGUF
    sim = sr.simulated_session_run(dataclasses.replace(prep, config=dataclasses.replace(cfg, engine="simulated")), "A")
    facts = [[(t.turn, t.slot, t.cache_n, t.prompt_n, [(b.start, b.n_tokens, b.reason) for b in t.batches],
               t.full_reprocess) for t in r.turns] for r in (sim, live)]
    assert len(facts[1]) == len(bodies) == 13
    assert facts[0] == facts[1]
    back = [i for i in range(1, len(bodies)) if bodies[i]["thread"] == "main" and bodies[i - 1]["thread"] != "main"]
    if args:  # one slot, no host cache: every switch back re-processes main, and says why
        assert {t.slot for t in live.turns} == {0}
        assert all(live.turns[i].cause["cause"] == "thread_switch" for i in back)
    else:  # the defaults: four slots, main back from its slot or the host cache, nothing lost
        assert len({t.slot for t in live.turns}) > 1
        assert all(live.turns[i].cause is None and live.turns[i].cache_n > 0 for i in back)
