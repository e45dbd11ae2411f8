"""Slots and the host prompt cache, simulated on short request streams (non-live).

The expected values follow from the server's rules (docs/cache-rules.md), not from a run:
who takes which slot, what is saved, loaded and evicted, and what each request reuses."""

from __future__ import annotations

from pathlib import Path

import pytest

from replayer.core.builds.catalog import parse_build
from replayer.core.engine.schedule import Knobs
from replayer.core.prompt import templates
from replayer.core.prompt.turn_layouts import turn_layouts
from replayer.core.server.cache_rules import rules_for
from replayer.core.server.help import parse_help
from replayer.core.server.host_cache import HostCache
from replayer.core.server.setup import parse_server_args
from replayer.core.server.slots import ServerSim, lcp
from replayer.core.server.state_size import StateSize
from replayer.core.server.traffic import agent_stream, requests_of, thread_counts
from replayer.core.session.turns import Turn

HELP = parse_help((Path(__file__).parent / "data" / "llama_server_help_b9859.txt").read_text(), 9859)
B = parse_build(9859)
SIZES = StateSize(per_token=524, fixed=120)  # a tiny model's order of size


def _requests(bodies):
    turns = [Turn(i, b) for i, b in enumerate(bodies)]
    lay = turn_layouts(turns, template=templates.bundled("chatml"), build=B)
    return requests_of(lay.prompts)


def _run(args: str, bodies, memory="plain", n_ctx=65536, build=B):
    setup = parse_server_args(args, HELP)
    knobs = Knobs(memory=memory, n_ctx=setup.n_ctx_slot or n_ctx)
    sim = ServerSim(setup, build, knobs, SIZES, n_ctx)
    return list(sim.run(_requests(bodies)))


def _switch(words: int = 40):
    """main, main, a subagent (its own system prompt), main again."""
    s = agent_stream(4, burst=1, words=words)
    main = [b for b in s if b["thread"] == "main"]
    sub = [b for b in s if b["thread"].startswith("subagent")]
    return [main[0], main[1], sub[0], main[2]]


def test_threads_of_the_stream():
    reqs = _requests(agent_stream(9, burst=2, words=10))
    assert thread_counts(reqs) == {"main": 9, "title": 1, "subagent-1": 2, "subagent-2": 2}
    assert [r.thread for r in reqs[:4]] == ["main", "main", "title", "main"]


def test_defaults_keep_the_main_thread_in_the_host_cache():
    f = _run("", _switch())
    # four empty slots: LRU ties go to the last one; main's second turn shares > 10 %: same slot
    assert [(x.slot, x.selected) for x in f] == [(3, "lru"), (3, "lcp"), (2, "lru"), (1, "lru")]
    # the subagent's launch saved the idle main slot (and cleared it: unified KV); main comes back from the cache
    assert [e.kind for e in f[2].cache] == ["saved"] and f[2].cache[0].thread == "main"
    assert f[3].loaded is not None and f[3].loaded.n_tokens == f[1].n_tokens
    assert f[3].cache_n == f[1].n_tokens and f[3].prompt_n == f[3].n_tokens - f[1].n_tokens
    assert f[2].cache_n == f[2].common_prefix < 10  # only the template's first tokens are shared


def test_one_slot_without_host_cache_reprocesses_each_switch():
    f = _run("-np 1 --cache-ram 0", _switch())
    assert {x.slot for x in f} == {0}
    reqs = _requests(_switch())
    assert f[3].selected == "lru" and f[3].cache_n == lcp(reqs[2].prompt, reqs[3].prompt) < 10
    assert not any(x.cache for x in f)


def test_two_slots_keep_both_threads():
    f = _run("-np 2 --cache-ram 0 --no-kv-unified", _switch())
    assert [(x.slot, x.selected) for x in f] == [(1, "lru"), (1, "lcp"), (0, "lru"), (1, "lcp")]
    assert f[3].cache_n == f[1].n_tokens


def test_eviction_order_and_limits():
    reqs = _requests(_switch())
    a, b = reqs[0].prompt, reqs[2].prompt  # main's first turn and the subagent's (unrelated)
    assert lcp(a, b) < 10
    rules9859, rules10001 = rules_for(9859), rules_for(10001)
    assert not rules9859.make_room_first and rules10001.make_room_first and rules10001.skip_oversize
    per_token = -(-(6 * 2**20 // 10) // min(a.n_tokens, b.n_tokens))  # each entry > 0.6 MiB
    for rules in (rules9859, rules10001):
        c = HostCache(1, 65536, StateSize(per_token=per_token, fixed=0), rules, lcp)
        ev: list = []
        assert c.save(a, a.n_tokens, [], "main", ev) and c.save(b, b.n_tokens, [], "sub", ev)
        c.update(ev)
        # over the 1 MiB limit with both: the oldest (main) goes, the newest stays
        assert [e.thread for e in c.states] == ["sub"]
        assert [(e.kind, e.thread) for e in ev if e.kind == "evicted"] == [("evicted", "main")]
        # a prompt the cache already holds whole is not saved again
        assert not c.save(b, b.n_tokens, [], "sub", ev)
        # larger than the whole limit: b9859 adds it (then keeps one, the newest); b9940+ skips it
        big = HostCache(1, 65536, StateSize(per_token=2**21 // a.n_tokens, fixed=0), rules, lcp)
        ev = []
        assert big.save(a, a.n_tokens, [], "main", ev) is not rules.skip_oversize


def test_a_small_host_cache_loses_the_main_thread():
    # with a limit below one main state, b10001 never saves main (too big) and main is re-processed
    reqs = _requests(_switch())
    n_main = reqs[1].prompt.n_tokens
    per_token = 2**20 // n_main + 1  # one main state > 1 MiB
    setup = parse_server_args("--cache-ram 1", HELP)
    sim = ServerSim(setup, parse_build(10001), Knobs(n_ctx=65536), StateSize(per_token, 0), 65536)
    f = list(sim.run(reqs))
    assert [e.kind for e in f[2].cache] == ["skipped"]
    assert f[3].loaded is None and f[3].cache_n < 10
    # on b9859 it is saved anyway (the cache keeps at least one entry): main comes back
    sim = ServerSim(setup, B, Knobs(n_ctx=65536), StateSize(per_token, 0), 65536)
    f = list(sim.run(reqs))
    assert f[3].loaded is not None and f[3].cache_n == n_main


def test_id_slot_names_the_slot():
    bodies = _switch()
    bodies[3] = {**bodies[3], "id_slot": 0}
    f = _run("-np 2 --cache-ram 0 --no-kv-unified", bodies)
    assert (f[3].slot, f[3].selected) == (0, "id")
    assert f[3].cache_n < 10  # slot 0 held the subagent: main is re-processed


@pytest.mark.parametrize("memory", ["swa", "recurrent"])
def test_checkpoints_travel_with_the_saved_prompt(memory):
    f = _run("", _switch(200), memory=memory)
    assert f[1].schedule.final_list, "a checkpointing model made checkpoints on main's second turn"
    assert f[3].loaded is not None
    n = f[1].n_tokens
    assert n > 256 + 512  # longer than the window and the SWA cells
    if memory == "recurrent":
        # back from the cache, main's prompt is only appended to: nothing to restore, all reused
        assert f[3].cache_n == n and f[3].schedule.restored is None
    else:
        # a saved SWA state holds only the window: the appended turn needs a checkpoint, which came along
        r = f[3].schedule.restored
        assert r is not None and r in f[1].schedule.final_list and f[3].cache_n == r.pos_max < n
    assert not f[3].full_reprocess
    # the same turns kept in their slot (-np 2, no host cache) need no restore on either kind
    g = _run("-np 2 --cache-ram 0", _switch(200), memory=memory)
    assert g[3].cache_n == n and g[3].schedule.restored is None


def _cli(*argv: str):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "replayer.cli", *argv], capture_output=True, text=True, timeout=300)


def test_cli_session_replay_through_the_users_server(tmp_path):
    import json

    log = tmp_path / "stream.jsonl"
    bodies = agent_stream(6, burst=1, words=30)
    log.write_text("".join(json.dumps(b) + "\n" for b in bodies))
    back = [i for i in range(1, len(bodies)) if bodies[i]["thread"] == "main" and bodies[i - 1]["thread"] != "main"]
    got = {}
    for args in ("", "-np 1 --cache-ram 0"):
        r = _cli("replay", str(log), "--mode", "session", "--server-args", args, "--json")
        assert r.returncode == 0, r.stderr
        got[args] = [t["cache_n"] for t in json.loads(r.stdout)["runs"][0]["turns"]]
    # the defaults bring main back from the host cache; one slot without it re-processes it
    assert all(got[""][i] > 10 * max(1, got["-np 1 --cache-ram 0"][i]) for i in back)
    r = _cli("replay", str(log), "--mode", "session", "--server-args", "--port 9 -np 2")
    notes = [ln for ln in r.stdout.splitlines() if ln.startswith("note: ")]
    assert r.returncode == 0 and notes[-4:] == [
        "note: server: -np 2 (per-slot KV), --cache-ram 8192 MiB, idle slots cached "
        "(b9859's defaults from b9859 llama-server --help)",
        "note: --port is replayer's own (it observes the server on 127.0.0.1 with -lv 4): dropped",
        "note: server: context -c 0 without a GGUF: the model's training context is unknown, so no context limit",
        "note: server: --cache-ram's limit is not simulated without a GGUF --model (state sizes unknown)"]
    r = _cli("replay", str(log), "--server-args", "-np 2")
    assert r.returncode != 0 and "goes with --mode session" in r.stderr
    r = _cli("replay", str(log), "--mode", "session", "--server-args", "-np 2 --warp 9")
    assert r.returncode != 0 and r.stderr.strip().splitlines() == [
        "replayer: error: b9859 llama-server does not know --warp (its --help: b9859 llama-server --help)"]


def test_why_each_thread_kept_or_lost_its_cache():
    from replayer.core.server.why import explain

    reqs = _requests(_switch())
    for args, kept, cause, fix in (("", "host cache", "", ""),
                                   ("-np 2 --cache-ram 0", "slot 1", "", ""),
                                   ("-np 1 --cache-ram 0", "", "slot 0 taken by subagent-1 (lru)", "-np 2")):
        setup = parse_server_args(args, HELP)
        f = list(ServerSim(setup, B, Knobs(n_ctx=65536), SIZES, 65536).run(reqs))
        w = explain(setup, reqs, f)
        assert w[0] is None and w[2] is None  # each thread's first request
        assert (w[1].kept, w[1].lost_tokens) == ("slot 3" if setup.n_parallel == 4 else f"slot {f[1].slot}", 0)
        back = w[3]
        assert (back.kept, back.cause, back.fix) == (kept, cause, fix)
        assert back.shared == f[1].n_tokens and back.lost_tokens == (back.shared - f[3].cache_n)
    # too large for the limit (b10001 skips it): the cause names the flag that fits it
    per_token = 2**20 // reqs[1].prompt.n_tokens + 1
    setup = parse_server_args("--cache-ram 1", HELP)
    f = list(ServerSim(setup, parse_build(10001), Knobs(n_ctx=65536), StateSize(per_token, 0), 65536).run(reqs))
    back = explain(setup, reqs, f)[3]
    assert back.kept == "" and back.cause == "larger than --cache-ram: not saved" and back.fix == "--cache-ram 2"
