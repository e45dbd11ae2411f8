"""Slots and the host prompt cache on real builds: per request, the simulation equals the server.

A short agent-shaped stream (17 requests on four threads: main, a title request, two
subagent bursts) is sent to real b9859, b10001 (and b11434 when installed) servers started with the user's flags;
the simulation runs on the prompts each server laid out. Every request's slot, how it was
selected, ``cache_n``, ``prompt_n``, host-cache saves/loads/evictions and checkpoints must be
the server's, and the saved states' sizes its own figures. Short on purpose (one server per
build, model and setup; ~2 min on 2 cores): the 73-request matrix is benchmarks/slots_matrix.py,
its results in docs/cache-rules.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from replayer.core.builds import manager
from replayer.core.engine.live import live_processes
from replayer.core.server.agreement import agree
from replayer.core.server.live_slots import live_key
from replayer.core.server.traffic import agent_stream

from test_live import tiny  # noqa: F401  (the tiny models fixture)

pytestmark = pytest.mark.live
#: b11434 (G3) joins when the build manager has it (it is compiled for the live suite)
BUILDS = (9859, 10001) + tuple(r.build for r in manager.list_builds() if r.build == 11434 and r.backend == "cpu")
STREAM = agent_stream(12, burst=2, words=40)


@pytest.fixture(scope="module")
def binaries():
    return {b: Path(manager.install(b, "cpu").binary) for b in BUILDS}


@pytest.fixture(autouse=True)
def no_orphans():
    yield
    assert live_processes() == []


def _agree(binaries, tiny, build, arch, args, preset=None):
    r = agree(binaries[build], tiny[arch], build, args, STREAM, preset=preset)
    assert len(r.sim) == len(STREAM) == 17
    diffs = {i: (r.sim[i].to_dict(), r.live.facts[i]) for i in r.differ}
    assert r.differ == [], diffs
    assert r.size_errors == []
    return r


@pytest.mark.parametrize("arch", ["llama", "gemma2", "lfm2"])
@pytest.mark.parametrize("build", BUILDS)
def test_defaults_and_one_slot(binaries, tiny, build, arch):
    """llama-server's defaults (4 unified slots, 8 GiB host cache, idle slots cached) against
    replayer's old setup (one slot, no host cache): the switches back to main are reused only
    with the defaults, where main comes back from the host cache."""
    d = _agree(binaries, tiny, build, arch, "")
    one = _agree(binaries, tiny, build, arch, "-np 1 --cache-ram 0")
    assert d.setup.n_parallel == 4 and d.setup.kv_unified and d.setup.cache_idle_slots
    back = [i for i in range(1, len(STREAM)) if STREAM[i]["thread"] == "main" and STREAM[i - 1]["thread"] != "main"]
    assert back and all(d.sim[i].loaded is not None for i in back)
    assert sum(d.live.cache_n) > sum(one.live.cache_n)
    assert {f.slot for f in one.sim} == {0} and not any(f.cache for f in one.sim)


@pytest.mark.parametrize(("arch", "args"), [("lfm2", "-np 2"), ("llama", "--cache-ram 1"),
                                            ("lfm2", "-np 4 --no-kv-unified")])
@pytest.mark.parametrize("build", BUILDS)
def test_other_setups(binaries, tiny, build, arch, args):
    """Two per-slot KV slots; a host cache small enough to evict (1 MiB: a ~1,900-token plain
    state is ~1 MiB); four slots without a unified KV cache (idle slots saved, not cleared)."""
    r = _agree(binaries, tiny, build, arch, args)
    if args == "--cache-ram 1":  # small enough to evict
        assert any(e.kind == "evicted" for f in r.sim for e in f.cache)
    if args == "-np 2":  # two slots, per-slot KV: the threads share them by similarity and LRU
        assert not r.setup.kv_unified and {f.slot for f in r.sim} == {0, 1}
    if "--no-kv-unified" in args:  # idle slots are saved but keep their tokens
        assert not r.setup.kv_unified and r.setup.cache_idle_slots
        assert any(e.kind == "saved" for f in r.sim for e in f.cache)


def test_router_mode_gives_the_plain_servers_facts(binaries, tiny, tmp_path):
    """A router started with a preset INI (``[*]`` globals, one model section) spawns the model's
    child server; its relayed log and answers give the same per-request facts as the plain server
    started with the same settings, and the simulation from the preset equals both."""
    ini = tmp_path / "models.ini"
    ini.write_text(f"version = 1\n[*]\nc = 65536\n[tiny]\nmodel = {tiny['lfm2']}\nload-on-startup = false\n")
    routed = _agree(binaries, tiny, 9859, "lfm2", "", preset=(ini, "tiny"))
    plain = _agree(binaries, tiny, 9859, "lfm2", "-c 65536")
    assert routed.setup.n_ctx == 65536 and routed.setup.model == str(tiny["lfm2"])
    assert [live_key(routed.live, i) for i in range(len(STREAM))] == [live_key(plain.live, i) for i in range(len(STREAM))]
    assert any(ln.startswith("[") for ln in routed.live.lines)  # the child's lines, relayed by the router
