"""Sleep between requests and a router's ``--models-max`` unloads on real builds: per request,
the simulation equals the server.

A short main-thread stream is sent with a real pause (a few seconds, longer than
``--sleep-idle-seconds 2``) before one request; the server's log must show it slept then and
only then, and each request's slot, selection, ``cache_n``, ``prompt_n``, host-cache events
and checkpoints must equal the simulation's, which reads the idle time from the times the
live run recorded. A router with two models (two copies of one tiny GGUF) and
``--models-max 1`` asked for them in turn stops one to load the other; with
``--models-max 2`` both stay. No timed assertion: the pauses only need to be on the right side
of the timeout (0 s and 4 s against 2 s).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from replayer.core.builds import manager
from replayer.core.engine.live import live_processes
from replayer.core.server.agreement import agree
from replayer.core.server.lifecycle import SLEPT, UNLOADED
from replayer.core.server.traffic import agent_stream

from test_live import tiny  # noqa: F401  (the tiny models fixture)

pytestmark = pytest.mark.live
INSTALLED = {r.build: Path(r.binary) for r in manager.list_builds() if r.backend == "cpu" and r.build >= 9000}
BUILDS = tuple(b for b in (9859, 10001, 11434) if b in INSTALLED)
MAIN = [b for b in agent_stream(6, burst=1, words=40) if b["thread"] == "main"][:4]


@pytest.fixture(autouse=True)
def no_orphans():
    yield
    assert live_processes() == []


@pytest.mark.parametrize("build", BUILDS)
def test_a_pause_past_the_sleep_timeout(tiny, build):
    """4 requests, a 4 s pause before the third: the server sleeps once, the third request starts
    cold (its slots and host cache were re-created on waking) and the fourth reuses it again."""
    r = agree(INSTALLED[build], tiny["llama"], build, "--sleep-idle-seconds 2", MAIN, pauses=[0, 0, 4.0, 0])
    assert r.differ == [], {i: (r.sim[i].to_dict(), r.live.facts[i]) for i in r.differ}
    assert r.live.slept[1:] == [False, True, False]  # the first may follow a slow start: nothing to lose
    assert [f.lost_state for f in r.sim] == ["", "", SLEPT, ""]
    assert r.live.cache_n[2] == 0 and r.live.cache_n[1] > 0 and r.live.cache_n[3] == r.live.prompts[2].n_tokens


def _two_models(tiny, tmp_path) -> Path:
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    shutil.copyfile(tiny["llama"], a)
    shutil.copyfile(tiny["llama"], b)
    ini = tmp_path / "models.ini"
    ini.write_text(f"version = 1\n[*]\nc = 16384\n[a]\nmodel = {a}\nload-on-startup = false\n"
                   f"[b]\nmodel = {b}\nload-on-startup = false\n")
    return ini


@pytest.mark.parametrize("models_max", [1, 2])
@pytest.mark.parametrize("build", BUILDS)
def test_router_alternating_two_models(tiny, tmp_path, build, models_max):
    """9859/10001 stop the LRU model in ``unload_lru``; b10865 on (b11434) its LRU scheduler queues
    the request and evicts in ``tick``: for requests one at a time, the same model goes."""
    ini = _two_models(tiny, tmp_path)
    bodies = [{**MAIN[k // 2], "model": "ab"[k % 2]} for k in range(4)]  # a, b, a, b: each its own thread
    r = agree(INSTALLED[build], tiny["llama"], build, f"--models-max {models_max}", bodies, preset=(ini, "a"))
    assert r.differ == [], {i: (r.sim[i].to_dict(), r.live.facts[i]) for i in r.differ}
    lost = [f.lost_state for f in r.sim]
    if models_max == 1:  # each switch stops the other model: its state is gone
        assert lost == ["", "", UNLOADED, UNLOADED] and r.live.cache_n[2:] == [0, 0]
    else:
        assert lost == [""] * 4 and r.live.cache_n[2] == r.live.prompts[0].n_tokens
