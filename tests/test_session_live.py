"""Session mode on real llama-server builds: per turn, the simulated slot cache equals the server.

A 23-turn tool-calling conversation, sent as a request log whose system prompt gains a date
from turn 20 on, is replayed live on each build with tiny plain (llama), SWA (gemma2) and
hybrid (lfm2) models. The simulator then runs on the prompts the server itself laid out
(its /apply-template and /tokenize), and every turn's cache_n, batches and checkpoint
events must be the server's. Nothing is fitted: the cache rules come from the source
(docs/cache-rules.md).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from replayer.core import session_replay as sr
from replayer.core.builds import manager
from replayer.core.builds.catalog import parse_build
from replayer.core.engine import events as ev
from replayer.core.engine.slot_turns import simulate_session
from replayer.core.engine.live import live_processes
from replayer.core.engine.live_session import live_session_events
from replayer.core.engine.schedule import Knobs
from replayer.core.engine.simulate import RunSpec
from replayer.core.prompt.turn_layouts import turn_layouts
from replayer.core.replay import ReplayConfig
from replayer.core.session.request import ChatRequest
from replayer.core.session.turns import turns_of_request

from conftest import REPO
from helpers import agent_conversation
from test_live import tiny  # noqa: F401  (the tiny models fixture, shared with the resume live tests)
from test_session_mode import edited_tool_result_turns, write_log

pytestmark = pytest.mark.live
#: b11434 (G3) joins when the build manager has it (it is compiled for the live suite)
BUILDS = (9859, 10001) + tuple(r.build for r in manager.list_builds() if r.build == 11434 and r.backend == "cpu")
ARCHS = ("llama", "gemma2", "lfm2")
CHANGE = 20


@pytest.fixture(scope="module")
def binaries():
    return {b: Path(manager.install(b, "cpu").binary) for b in BUILDS}


@pytest.fixture(scope="module")
def log(tmp_path_factory):
    msgs, tools = agent_conversation(rounds=11)
    turns = turns_of_request(ChatRequest({"messages": msgs, "tools": tools}))
    assert len(turns) == 23
    return write_log(tmp_path_factory.mktemp("session-log") / "requests.jsonl", turns, change_from=CHANGE)


@pytest.fixture(autouse=True)
def no_orphans():
    yield
    assert live_processes() == []


RUNS: dict = {}


def _live(binaries, tiny, log, build, arch):
    key = (build, arch)
    if key not in RUNS:
        cfg = ReplayConfig(a=str(build), b=str(build), model=str(tiny[arch]))
        prep = sr.prepare_session(log, cfg)
        evs = list(live_session_events(prep, "A", tiny[arch], binary=binaries[build]))
        RUNS[key] = (prep, evs, sr.session_run(prep, "A", evs))
    return RUNS[key]


def _facts(run):
    return [(t.turn, t.n_prompt, t.cache_n, t.prompt_n, [(b.start, b.n_tokens, b.reason) for b in t.batches],
             [(c.n_tokens, c.pos_min, c.pos_max) for c in t.created], [(e.n_tokens, e.reason) for e in t.erased],
             (t.restored.n_tokens, t.restored.n_past) if t.restored else None, t.full_reprocess) for t in run.turns]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("build", BUILDS)
def test_simulated_turns_equal_the_live_server(binaries, tiny, log, build, arch):
    prep, evs, live = _live(binaries, tiny, log, build, arch)
    assert live.failed is None, live.failed
    assert len(live.turns) == 23
    s = live.settings
    knobs = Knobs(memory=s["memory"], n_swa=s["n_swa"])
    sim_events = simulate_session(RunSpec("A", parse_build(str(build)), knobs), prep.layouts["A"].prompts,
                                  ReplayConfig().cost())
    sim = sr.session_run(prep, "A", sim_events)
    assert _facts(sim) == _facts(live)
    # the server's own numbers: timings.cache_n, and the progress stream's first value
    for t in live.turns:
        assert t.cache_n + t.prompt_n == t.n_prompt
        if t.batches:
            assert t.batches[0].start == t.cache_n and t.batches[-1].end == t.n_prompt


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("build", BUILDS)
def test_appending_turns_reuse_everything_and_the_changed_system_prompt_is_named(binaries, tiny, log, build, arch):
    _, _, live = _live(binaries, tiny, log, build, arch)
    for prev, t in zip(live.turns, live.turns[1:]):
        if t.turn != CHANGE:
            assert t.cache_n == prev.n_prompt and not t.full_reprocess and t.cause is None
    t = live.turns[CHANGE]
    c = t.cause
    assert c["cause"] == "client_changed" and c["where"].startswith("system prompt")
    assert "Today is 2026-12-01" in c["new_text"] and "Today is" not in c["old_text"]
    assert c["lost_tokens"] > 0 and c["lost_ms"] > 0
    if arch == "llama":  # plain KV keeps the common prefix
        assert t.cache_n == c["first_diff_token"] and not t.full_reprocess
    else:  # checkpoints sit at user starts and near the end: none below the change
        assert t.full_reprocess and t.cache_n == 0
        assert "none at or below the change" in c["checkpoint"]
        assert {e.reason for e in t.erased} == {"invalidated"}
    # every turn says whether a checkpoint had to (and could) be restored
    assert t.restore == ("not_needed" if arch == "llama" else "none_usable")
    assert {u.restore for u in live.turns if u.turn != CHANGE} == {"not_needed"}


@pytest.mark.parametrize("build", BUILDS)
def test_offline_exact_turn_prompts_equal_the_servers(binaries, tiny, log, build):
    """The prompts derived from one render and one tokenization are the server's, token for token."""
    prep, _, _ = _live(binaries, tiny, log, build, "llama")
    offline = turn_layouts(prep.turns.turns, tokenizer=f"gguf:{tiny['llama']}", build=parse_build(str(build)))
    assert not offline.fallbacks and offline.renders < 12
    for mine, server in zip(offline.prompts, prep.layouts["A"].prompts):
        assert mine.ids == server.ids
        assert mine.spans == server.spans


def test_checkpoint_churn_between_builds(binaries, tiny, log):
    """On appending turns b9859 makes 1-2 checkpoints; b10001 makes three — at the previous
    prompt's end, at the last user start and at n − 4 (turns here add < 516 tokens, so the
    n − 516 cut falls before the previous end) — and evicts the earlier turns' ones as too close."""
    g1 = _live(binaries, tiny, log, 9859, "lfm2")[2]
    prep, _, g2 = _live(binaries, tiny, log, 10001, "lfm2")
    for t in g1.turns[1:CHANGE]:
        assert 1 <= len(t.created) <= 2
    for prev, t in zip(g2.turns[1:CHANGE], g2.turns[2:CHANGE]):
        last_user = prep.layouts["A"].prompts[t.turn].spans.last_user
        assert t.n_prompt - 516 < prev.n_prompt < last_user
        assert [c.n_tokens for c in t.created] == [prev.n_prompt, last_user, t.n_prompt - 4]
    assert any(e.reason == "too_close" for t in g2.turns for e in t.erased)


@pytest.mark.parametrize("build", BUILDS)
def test_a_late_edit_restores_a_checkpoint_on_the_hybrid_model(binaries, tiny, tmp_path, build):
    """The client rewrites the newest tool result from turn 10 on: the server restores the
    newest checkpoint below the change, as the simulator says."""
    msgs, tools = agent_conversation(rounds=6)
    turns = edited_tool_result_turns(turns_of_request(ChatRequest({"messages": msgs, "tools": tools})))
    log = write_log(tmp_path / "edited.jsonl", turns)
    cfg = ReplayConfig(a=str(build), b=str(build), model=str(tiny["lfm2"]))
    prep = sr.prepare_session(log, cfg)
    live = sr.session_run(prep, "A", live_session_events(prep, "A", tiny["lfm2"], binary=binaries[build]))
    assert live.failed is None, live.failed
    knobs = Knobs(memory=live.settings["memory"], n_swa=live.settings["n_swa"])
    sim = sr.session_run(prep, "A", simulate_session(RunSpec("A", parse_build(str(build)), knobs),
                                                     prep.layouts["A"].prompts, ReplayConfig().cost()))
    assert _facts(sim) == _facts(live)
    t = live.turns[10]
    assert t.restore == "restored" and t.cache_n == t.restored.n_tokens <= t.cause["first_diff_token"]
    assert t.cause["cause"] == "client_changed" and "(truncated by the client)" in t.cause["new_text"]


def test_cli_live_session(binaries, tiny, log):
    r = subprocess.run([sys.executable, "-m", "replayer.cli", "replay", str(log), "--mode", "session", "--engine",
                        "live", "--a", "9859", "--b", "10001", "--model", str(tiny["gemma2"]), "--json"],
                       capture_output=True, text=True, cwd=REPO, timeout=900)
    assert r.returncode == 0, r.stderr
    doc = orjson.loads(r.stdout)
    for run in doc["runs"]:
        assert run["engine"] == "live" and run["n_turns"] == 23 and run["misses"] == [CHANGE]
        assert run["turns"][CHANGE]["full_reprocess"] and run["turns"][CHANGE]["cause"] == "client_changed"


def test_a_failed_build_is_a_run_failure(tiny, log, tmp_path):
    cfg = ReplayConfig(a=str(tmp_path / "missing" / "llama-server"), b="10001", model=str(tiny["llama"]))
    prep = sr.prepare_session(log, ReplayConfig(model=str(tiny["llama"])))
    prep.config = cfg
    evs = list(live_session_events(prep, "A", tiny["llama"]))
    assert isinstance(evs[-1], ev.RunFailed) and "no such" in evs[-1].error
