"""Sleep between requests and a router's model unloads, simulated on short streams (non-live).

The expected values follow from the server's rules (docs/cache-rules.md, "Sleep and router
unloads"): a pause of at least ``--sleep-idle-seconds`` since the model's previous request
ended starts every slot and the host cache over; a router holding ``--models-max`` models
stops the least recently used one to load another. Nothing here is fitted to a run: a state
lost is a request whose ``cache_n`` is 0 where the same stream without the pause reuses its
whole previous prompt."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from replayer.core.builds.catalog import parse_build
from replayer.core.engine.schedule import Knobs
from replayer.core.prompt import templates
from replayer.core.prompt.turn_layouts import turn_layouts
from replayer.core.server.help import parse_help
from replayer.core.server.lifecycle import SLEPT, UNLOADED, ServerLife, idle_before, is_router, life_notes
from replayer.core.server.session import NO_LIMIT, server_context
from replayer.core.server.setup import parse_server_args
from replayer.core.server.slots import ServerSim
from replayer.core.server.state_size import StateSize
from replayer.core.server.traffic import Request, agent_stream, requests_of
from replayer.core.server.why import explain
from replayer.core.session.turns import Turn

HELP = parse_help((Path(__file__).parent / "data" / "llama_server_help_b9859.txt").read_text(), 9859)
B = parse_build(9859)
SIZES = StateSize(per_token=524, fixed=120)


def _main(n: int = 5) -> list[dict]:
    return [b for b in agent_stream(n, burst=1, words=30) if b["thread"] == "main"][:n]


def _requests(bodies, times=None, models=None) -> list[Request]:
    turns = []
    for i, b in enumerate(bodies):
        t = Turn(i, {**b, "model": models[i]} if models else b)
        t.times = times[i] if times else None
        turns.append(t)
    lay = turn_layouts(turns, template=templates.bundled("chatml"), build=B)
    return requests_of(lay.prompts)


def _run(args: str, reqs):
    setup = parse_server_args(args, HELP)
    life = ServerLife(setup, lambda: ServerSim(setup, B, Knobs(n_ctx=65536), SIZES, 65536))
    facts = list(life.run(reqs))
    return setup, facts


def _timed(pause_before: int, pause: float, n: int = 5, answer: float = 2.0):
    """Requests every 10 s, each answered in ``answer`` s; ``pause`` more seconds before one."""
    out, t = [], 0.0
    for i in range(n):
        t += pause if i == pause_before else 0.0
        out.append((t, t + answer))
        t += 10.0
    return out


def test_idle_is_from_the_previous_answer_else_its_send_time():
    reqs = _requests(_main(3), times=[(0.0, 3.0), (10.0, None), (25.0, 26.0)])
    assert idle_before(None, reqs[0]) is None
    assert idle_before(reqs[0], reqs[1]) == 7.0
    assert idle_before(reqs[1], reqs[2]) == 15.0  # no end recorded: from its send time
    untimed = _requests(_main(2))
    assert idle_before(untimed[0], untimed[1]) is None


def test_a_pause_longer_than_the_sleep_timeout_starts_the_server_over():
    reqs = _requests(_main(), times=_timed(3, 100.0))
    _, awake = _run("", reqs)  # the default -1: never sleeps
    assert [f.lost_state for f in awake] == [""] * 5
    assert awake[3].cache_n == reqs[2].prompt.n_tokens  # the whole previous prompt reused
    for timeout, slept in ((60, True), (108, True), (109, False)):  # idle before request 3: 108 s
        setup, f = _run(f"--sleep-idle-seconds {timeout}", reqs)
        assert [x.lost_state for x in f] == ["", "", "", SLEPT if slept else "", ""], timeout
        assert f[3].idle_s == 108.0
        if slept:  # woken: empty slots, an empty host cache — the whole prompt again
            assert (f[3].cache_n, f[3].prompt_n, f[3].cache) == (0, reqs[3].prompt.n_tokens, [])
            assert f[4].cache_n == reqs[3].prompt.n_tokens  # and from then on as before
            why = explain(setup, reqs, f)[3]
            assert why.cause == f"the server slept: idle 108.0 s ≥ --sleep-idle-seconds {timeout}"
            assert why.fix == "--sleep-idle-seconds 109" and why.lost_tokens == reqs[2].prompt.n_tokens
        else:
            assert f[3].cache_n == awake[3].cache_n


def test_sleep_drops_every_thread_and_the_host_cache():
    s = agent_stream(6, burst=2, words=30)  # main, title, a subagent burst, main again
    times = [(i * 5.0 + (200.0 if i == len(s) - 1 else 0.0), i * 5.0 + 1.0 + (200.0 if i == len(s) - 1 else 0.0))
             for i in range(len(s))]
    reqs = _requests(s, times=times)
    _, kept = _run("", reqs)
    setup, f = _run("--sleep-idle-seconds 30", reqs)
    # awake, main comes back from the host cache after the subagent's burst; asleep, nothing does
    assert kept[-1].loaded is not None and kept[-1].loaded.thread == "main" and kept[-1].cache_n > 0
    assert f[-1].lost_state == SLEPT and f[-1].cache_n == 0 and f[-1].loaded is None
    assert [x.cache_n for x in f[:-1]] == [x.cache_n for x in kept[:-1]]


def test_untimed_requests_never_sleep_and_the_notes_say_so():
    reqs = _requests(_main())
    _, f = _run("--sleep-idle-seconds 0", reqs)
    assert [x.lost_state for x in f] == [""] * 5
    setup = parse_server_args("--sleep-idle-seconds 0", HELP)
    turns = [r.prompt.turn for r in reqs]
    assert life_notes(setup, turns) == ["--sleep-idle-seconds 0: the requests carry no times (this format records "
                                        "none), so no sleep is simulated"]
    for t in turns:
        t.times = (1.0, None)
    assert "not when its answer ended" in life_notes(setup, turns)[0]
    assert life_notes(parse_server_args("", HELP), turns) == []


def _two_models(order: str):
    """Two conversations of their own, one per model, asked for in ``order`` (e.g. "abab")."""
    a, b = _main(4), [{**x, "messages": [{"role": "system", "content": "Other model. " + x["messages"][0]["content"]},
                                         *x["messages"][1:]]} for x in _main(4)]
    seq, models, k = [], [], {"a": 0, "b": 0}
    for m in order:
        seq.append((a if m == "a" else b)[k[m]])
        models.append(f"model-{m}")
        k[m] += 1
    return _requests(seq, models=models)


def test_router_models_max_unloads_the_least_recently_used_model():
    reqs = _two_models("abab")
    setup, one = _run("--models-max 1", reqs)
    assert is_router(setup) and [f.lost_state for f in one] == ["", "", UNLOADED, UNLOADED]
    assert [f.cache_n for f in one[2:]] == [0, 0]
    why = explain(setup, reqs, one)
    assert why[2].cause == "the router unloaded the model (--models-max 1)" and why[2].fix == "--models-max 2"
    _, two = _run("--models-max 2", reqs)
    assert [f.lost_state for f in two] == [""] * 4
    assert two[2].cache_n == reqs[0].prompt.n_tokens and two[3].cache_n == reqs[1].prompt.n_tokens
    _, unlimited = _run("--models-max 0", reqs)
    assert [f.cache_n for f in unlimited] == [f.cache_n for f in two]


def test_router_lru_order_and_each_model_its_own_slots():
    a, b, c = _main(3), _main(3), _main(3)  # three models, each given the same conversation
    reqs = _requests([a[0], b[0], c[0], b[1], a[1]], models=["a", "b", "c", "b", "a"])
    setup, f = _run("--models-max 2", reqs)
    # loading c stops a (least recently used); b stays; a again stops c (b was used later)
    assert [x.lost_state for x in f] == ["", "", "", "", UNLOADED]
    assert f[3].cache_n == reqs[1].prompt.n_tokens and f[4].cache_n == 0
    assert explain(setup, reqs, f)[4].fix == "--models-max 3"  # a, and b and c asked for since
    # without a router the model field is not a server of its own: one server, one cache
    _, plain = _run("", reqs)
    assert all(x.lost_state == "" for x in plain)


def test_the_fix_is_priced_by_the_same_simulation(tmp_path):
    from replayer.core.replay import ReplayConfig
    from replayer.core.server.session import price_fixes, server_why
    from replayer.core.session_replay import prepare_session, run_spec

    log = tmp_path / "stream.jsonl"
    log.write_text("".join(json.dumps(b) + "\n" for b in _main()))
    prep = prepare_session(log, ReplayConfig.seed(template="chatml"))
    prompts = prep.layouts["A"].prompts
    for p, (sent, done) in zip(prompts, _timed(3, 100.0)):
        p.turn.times = (sent, done)
    spec = run_spec("A", prep.config)
    why = server_why("--sleep-idle-seconds 60", spec, prompts, None, None)
    fixes = price_fixes("--sleep-idle-seconds 60", spec, prompts, None, None, why)
    lost = prompts[2].n_tokens
    assert fixes == [{"flag": "--sleep-idle-seconds 109", "requests": 1, "prompt_n": sum(
        p.n_tokens for p in prompts[:1]) + sum(p.n_tokens - q.n_tokens for q, p in zip(prompts, prompts[1:])) + lost,
        "prompt_n_with": sum(p.n_tokens for p in prompts[:1]) + sum(
            p.n_tokens - q.n_tokens for q, p in zip(prompts, prompts[1:])), "saved_tokens": lost}]


def test_the_context_assumed():
    setup = parse_server_args("", HELP)
    assert server_context(setup, None, None)[0] is None
    assert server_context(parse_server_args("-c 4096", HELP), 8192, None) == (4096, "-c 4096 (the command line)")
    assert server_context(setup, 8192, None) == (8192, "--ctx-size 8192")

    class G:
        n_ctx_train = 2048

    assert server_context(setup, None, G())[0] == 2048
    assert NO_LIMIT > 10**9


def _cli(*argv: str):
    return subprocess.run([sys.executable, "-m", "replayer.cli", *argv], capture_output=True, text=True, timeout=300)


def test_no_context_limit_without_a_gguf_unless_c_is_given(tmp_path):
    """llama-server's -c 0 is the model's training context: without the GGUF replayer does not
    know it and assumes none (as the one-slot replay does); a -c on the command line is kept."""
    log = tmp_path / "stream.jsonl"
    log.write_text("".join(json.dumps(b) + "\n" for b in _main(4)))
    got = {}
    for args in (None, "", "-c 200"):
        extra = [] if args is None else ["--server-args", args]
        r = _cli("replay", str(log), "--mode", "session", *extra, "--json")
        assert r.returncode == 0, r.stderr
        got[args] = [bool(t.get("error")) for t in json.loads(r.stdout)["runs"][0]["turns"]]
    assert got[None] == got[""] == [False] * 4
    assert got["-c 200"][0] is False and got["-c 200"][-1] is True  # the last prompts pass 200 tokens


@pytest.mark.parametrize("build", [9859, 10001, 11434])
def test_every_build_has_both_flags(build):
    """Each shipped help names both flags with the defaults the simulation reads."""
    from replayer.core.server.help import help_for

    d = help_for(build).defaults
    assert d["sleep_idle_seconds"] == -1 and d["models_max"] == 4


def _traffic_log(path: Path, bodies: list[dict], times: list[tuple[float, float]]) -> Path:
    """A ``replayer record`` traffic log: each line's ``time`` (arrival) and ``t_total_ms``."""
    import hashlib

    lines = []
    for k, (b, (sent, done)) in enumerate(zip(bodies, times)):
        raw = json.dumps(b)
        lines.append(json.dumps({"v": 1, "seq": k, "time": sent, "endpoint": "/v1/chat/completions", "body": b,
                                 "body_sha256": hashlib.sha256(raw.encode()).hexdigest(), "status": 200,
                                 "t_total_ms": (done - sent) * 1000, "thread": b.get("thread")}))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_traffic_log_gives_exact_idle_times_and_the_report_names_the_sleep(tmp_path):
    from replayer.core.session.turns import load_turns

    times = _timed(2, 300.0, n=4, answer=3.0)
    log = _traffic_log(tmp_path / "traffic.jsonl", _main(4), times)
    st = load_turns(log)
    assert st.session.format == "traffic-log" and [t.times for t in st.turns] == times
    r = _cli("replay", str(log), "--mode", "session", "--server-args", "--sleep-idle-seconds 120", "--json")
    assert r.returncode == 0, r.stderr
    run = json.loads(r.stdout)["runs"][0]
    why = {w["request"]: w for w in run["why"]}
    assert why[2]["cause"] == "the server slept: idle 307.0 s ≥ --sleep-idle-seconds 120"
    assert why[2]["fix"] == "--sleep-idle-seconds 308" and why[2]["lost_tokens"] > 0
    assert [t["cache_n"] == 0 for t in run["turns"]] == [True, False, True, False]
    assert run["fixes"][0]["flag"] == "--sleep-idle-seconds 308"
    miss = run["turns"][2]  # the miss itself is named for what happened, not a checkpoint
    assert miss["cause"] == "server_slept" and miss["lost_tokens"] == why[2]["lost_tokens"]
    assert miss["detail"] == why[2]["cause"] + " (would keep it: --sleep-idle-seconds 308)"
    assert all(t.get("cause") is None for k, t in enumerate(run["turns"]) if k != 2)
    assert run["fixes"][0]["saved_tokens"] == why[2]["lost_tokens"]


def test_an_imported_session_dates_its_requests_by_its_responses():
    from replayer.core.session.threads import message_times
    from replayer.core.session.turns import load_turns

    st = load_turns(Path(__file__).parents[1] / "fixtures" / "claude-code" / "small.jsonl")
    sent = message_times(st.session)
    assert sent and all(isinstance(t, float) for t in sent)
    assert [t.times for t in st.turns[:-1]] == [(s, None) for s in sent[:len(st.turns) - 1]]
    assert st.turns[-1].times is None  # the resume request was never sent


def test_advise_prices_the_flag_that_keeps_the_state(tmp_path):
    """``advise --mode session --server-args``: the user's server's time, and the sleep timeout
    that keeps the state priced by the same simulation (the report's own fix)."""
    log = _traffic_log(tmp_path / "traffic.jsonl", _main(4), _timed(2, 300.0, n=4, answer=3.0))
    r = _cli("advise", str(log), "--mode", "session", "--server-args", "--sleep-idle-seconds 120 -np 2", "--json")
    assert r.returncode == 0, r.stderr
    srv = json.loads(r.stdout)["server"]
    assert srv["server_args"] == "--sleep-idle-seconds 120 -np 2" and srv["lost"] > 0
    (fix,) = srv["fixes"]
    assert fix["flag"] == "--sleep-idle-seconds 308" and fix["requests"] == 1
    assert fix["command"] == "llama-server -np 2 --sleep-idle-seconds 308"
    assert fix["saving_ms"] > 0 and fix["prompt_n"] == srv["prompt_n"] - srv["lost"]
    # the same flag in the replay: the saving is the report's own
    args = fix["replayer_command"].split(" ", 1)[1]
    import shlex

    rep = _cli(*shlex.split(args))
    assert rep.returncode == 0, rep.stderr
    assert sum(t["prompt_n"] for t in json.loads(rep.stdout)["runs"][0]["turns"]) == fix["prompt_n"]
    bad = _cli("advise", str(log), "--server-args", "-np 2")
    assert bad.returncode != 0 and bad.stderr.strip() == "replayer: error: advise --server-args goes with --mode session"


def test_the_notes_of_a_live_run_say_what_it_cannot_show():
    """A live session replay sends the requests back to back on one plain server: the notes say
    that it neither sleeps where the recorded pauses would nor unloads like a router."""
    import dataclasses

    from replayer.core.replay import ReplayConfig
    from replayer.core.server.session import setup_notes

    sim = ReplayConfig.seed(template="chatml")
    live = dataclasses.replace(sim, engine="live")
    turns = [r.prompt.turn for r in _two_models("abab")]
    args = "--sleep-idle-seconds 0 --models-max 1"
    on_sim, on_live = setup_notes(args, sim, turns), setup_notes(args, live, turns)
    assert "router: 2 model(s) named by the requests (model-a, model-b), --models-max 1, LRU unload" in on_sim
    assert [n for n in on_live if n not in on_sim] == [
        "live: the requests are sent one after the other without the recorded pauses, so the real server does "
        "not sleep between them where the simulation does",
        "live: one llama-server, not a router: --models-max unloads are simulated only"]
