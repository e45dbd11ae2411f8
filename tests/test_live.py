"""Live replays on real llama-server builds (b9859 G1, b10001 G2b, b11434 G3; CPU, built by the build manager).

These are the tests that prove the simulator faithful: for every live run, the schedule
given the same layout and build predicts identical batch boundaries and checkpoints.
"""

from __future__ import annotations

import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from replayer.core.builds import manager
from replayer.core.builds.catalog import parse_build
from replayer.core.engine import events as ev
from replayer.core.engine.live import LiveOptions, LiveResult, live_events, live_processes
from replayer.core.engine.schedule import Knobs, Slot
from replayer.core.prompt.layout import compute_layout
from replayer.core.tiny_models import make_tiny

from conftest import REPO, SESSION_TAG
from helpers import EXIT_S, agent_conversation, reaped, replay_until

pytestmark = pytest.mark.live
BUILDS = (9859, 10001, 11434)  # make LIVE_BUILDS must list them all
MEMORY = {"llama": "plain", "gemma2": "swa", "lfm2": "recurrent", "mamba": "recurrent"}


class _Builds(dict):
    """Installed builds by number; one a test asks for is installed then (cold: a compile)."""

    def __missing__(self, build: int) -> Path:
        self[build] = Path(manager.install(build, "cpu").binary)
        return self[build]


@pytest.fixture(scope="session")
def binaries():
    """Real builds through the build manager (cached; ~6-10 min each when cold)."""
    builds = _Builds()
    for b in (9859, 10001):  # every test's process checks look for these two
        builds[b]
    return builds


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("models")
    return {arch: make_tiny(arch, d / f"{arch}.gguf") for arch in MEMORY}


@pytest.fixture(scope="session")
def conversation():
    msgs, tools = agent_conversation(rounds=30)
    assert len(msgs) == 122
    return {"messages": msgs, "tools": tools}


def _server_pids(binary_paths) -> list[int]:
    """llama-server processes started by this test session (tagged through the environment)."""
    tag = f"REPLAYER_TEST_SESSION={SESSION_TAG}".encode()
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
            if not any(cmd == str(b) for b in binary_paths):
                continue
            if tag in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                pids.append(int(pid))
        except OSError:
            continue
    return pids


@pytest.fixture(autouse=True)
def no_orphans(request):
    yield
    if "binaries" in request.fixturenames:
        bins = request.getfixturevalue("binaries").values()
        deadline = time.monotonic() + 10
        while _server_pids(bins) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _server_pids(bins) == [], "a llama-server outlived the replay"
    assert live_processes() == []


RUNS = {}


def _run(binaries, tiny, conversation, build, arch):
    key = (build, arch)
    if key not in RUNS:
        res = LiveResult()
        knobs = Knobs(memory=MEMORY[arch])
        evs = list(live_events("A", parse_build(str(build)), knobs, LiveOptions(binaries[build], tiny[arch]),
                               conversation, result=res))
        RUNS[key] = (evs, res, knobs)
    return RUNS[key]


@pytest.mark.parametrize("arch", list(MEMORY))
@pytest.mark.parametrize("build", BUILDS)
def test_simulator_predicts_live_run_exactly(binaries, tiny, conversation, build, arch):
    evs, res, knobs = _run(binaries, tiny, conversation, build, arch)
    assert not [e for e in evs if isinstance(e, ev.RunFailed)], evs[-1]
    batches = [e for e in evs if isinstance(e, ev.BatchDone)]
    created = [e for e in evs if isinstance(e, ev.CheckpointCreated)]
    assert res.progress[0] == 0 and res.progress[-1] == res.layout.n_tokens
    # the log's batch starts and the progress stream agree
    assert res.log_batch_starts == [b.start for b in batches]
    sim = Slot(parse_build(str(build)), knobs).run(res.layout.prompt_spans())
    assert [(b.start, b.n_tokens) for b in sim.batches] == [(b.start, b.n_tokens) for b in batches]
    assert [(c.n_tokens, c.pos_min, c.pos_max) for c in sim.checkpoints] == [
        (c.n_tokens, c.pos_min, c.pos_max) for c in created]
    assert [b.reason for b in sim.batches] == [b.reason for b in batches]
    fin = evs[-1]
    assert isinstance(fin, ev.RunFinished) and fin.n_batches == len(batches) and fin.prompt_ms > 0
    assert fin.status == res.status == "complete"


def test_regression_breaks_at_every_user_start(binaries, tiny, conversation):
    evs, res, _ = _run(binaries, tiny, conversation, 9859, "llama")
    batches = [e for e in evs if isinstance(e, ev.BatchDone)]
    starts = [u for u in res.layout.user_starts if u > 0]
    assert len(starts) == 61
    assert len(batches) >= len(starts) + 1
    assert [b.end for b in batches[:-1]] == starts  # every cut is a user/tool-result start
    assert all(b.reason == "user_start" for b in batches[:-1])


def test_fix_breaks_only_at_n_batch(binaries, tiny, conversation):
    evs, res, _ = _run(binaries, tiny, conversation, 10001, "llama")
    batches = [e for e in evs if isinstance(e, ev.BatchDone)]
    assert len(batches) == math.ceil(res.layout.n_tokens / 2048)
    assert {b.reason for b in batches} == {"n_batch", "prompt_end"}


@pytest.mark.parametrize("arch", ["gemma2", "lfm2", "mamba"])
def test_checkpointing_models_show_checkpoints(binaries, tiny, conversation, arch):
    for build in BUILDS:
        evs, res, _ = _run(binaries, tiny, conversation, build, arch)
        created = [e for e in evs if isinstance(e, ev.CheckpointCreated)]
        assert len(created) >= 3
        assert created[0].n_tokens == res.layout.user_starts[0]  # the first user message (the system turn is no span)
        offsets = [b for b in evs if isinstance(b, ev.BatchDone) and b.reason == "checkpoint_offset"]
        assert [b.end for b in offsets] == [res.layout.n_tokens - 516, res.layout.n_tokens - 4]


def test_gguf_and_server_layouts_match_the_server(binaries, tiny, conversation):
    evs, res, _ = _run(binaries, tiny, conversation, 9859, "llama")
    gg = compute_layout(conversation["messages"], conversation["tools"], tokenizer=f"gguf:{tiny['llama']}", build="9859")
    total = res.progress[-1]
    breaks = [b.end for b in evs if isinstance(b, ev.BatchDone)][:-1]
    assert gg.n_tokens == res.layout.n_tokens == total
    assert gg.user_starts == res.layout.user_starts
    assert [u for u in gg.user_starts if u > 0] == breaks
    assert res.layout.tokenizer.startswith("server:")


# -- faults -------------------------------------------------------------------------------

def _one(binary, model, conversation, **kw):
    return list(live_events("A", parse_build("9859"), Knobs(), LiveOptions(Path(binary), Path(model), **kw),
                            conversation))


def test_missing_binary(tmp_path, tiny, conversation):
    evs = _one(tmp_path / "llama-server", tiny["llama"], conversation)
    assert isinstance(evs[-1], ev.RunFailed) and "no such binary" in evs[-1].error


def test_binary_that_is_not_llama_server(tiny, conversation):
    evs = _one("/bin/true", tiny["llama"], conversation)
    assert isinstance(evs[-1], ev.RunFailed) and "does not look like llama-server" in evs[-1].error


def test_corrupt_model(binaries, tmp_path, conversation):
    bad = tmp_path / "corrupt.gguf"
    bad.write_bytes(b"GGUF" + os.urandom(4096))
    evs = _one(binaries[9859], bad, conversation)
    assert isinstance(evs[-1], ev.RunFailed) and "exited with code" in evs[-1].error


def test_port_in_use(binaries, tiny, conversation):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    try:
        evs = _one(binaries[9859], tiny["llama"], conversation, port=s.getsockname()[1])
    finally:
        s.close()
    assert isinstance(evs[-1], ev.RunFailed) and "already in use" in evs[-1].error


def test_never_healthy(tmp_path, tiny, conversation):
    fake = tmp_path / "llama-server"
    fake.write_text("#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'version: 9859 (fake)'; exit 0; fi\nexec sleep 60\n")
    fake.chmod(0o755)
    t = time.monotonic()
    evs = _one(fake, tiny["llama"], conversation, health_timeout=2.0)
    assert isinstance(evs[-1], ev.RunFailed) and "did not become healthy" in evs[-1].error
    assert time.monotonic() - t < 30
    assert _server_pids([fake]) == []


def test_http_error_body(binaries, tiny, conversation):
    body = dict(conversation, top_k="many")
    evs = _one(binaries[9859], tiny["llama"], body)
    assert isinstance(evs[-1], ev.RunFailed) and "HTTP" in evs[-1].error


def test_server_killed_mid_prefill(binaries, tiny):
    msgs, tools = agent_conversation(rounds=120, tool_result_words=120)
    body = {"messages": msgs, "tools": tools}
    gen = live_events("A", parse_build("9859"), Knobs(memory="swa"), LiveOptions(binaries[9859], tiny["gemma2"]), body)
    seen = []
    for e in gen:
        seen.append(e)
        if isinstance(e, ev.BatchDone) and e.index == 3:
            for p in live_processes():
                os.kill(p.pid, signal.SIGKILL)
    assert isinstance(seen[-1], ev.RunFailed) and "died" in seen[-1].error


def test_cli_one_run_fails_other_goes_on(binaries, tiny, tmp_path):
    msgs, tools = agent_conversation(rounds=10)
    f = tmp_path / "req.json"
    f.write_bytes(orjson.dumps({"messages": msgs, "tools": tools}))
    r = subprocess.run([sys.executable, "-m", "replayer.cli", "replay", str(f), "--engine", "live",
                        "--a", str(tmp_path / "missing" / "llama-server"), "--b", "10001",
                        "--model", str(tiny["llama"]), "--json"], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert r.returncode == 1
    doc = orjson.loads(r.stdout)
    a, b = doc["runs"]
    assert a["error"] and "no such" in a["error"]
    assert b["error"] is None and b["n_batches"] >= 1 and b["engine"] == "live"


def test_ctrl_c_leaves_no_server(binaries, tiny, tmp_path):
    msgs, tools = agent_conversation(rounds=200, tool_result_words=150)
    f = tmp_path / "big.json"
    f.write_bytes(orjson.dumps({"messages": msgs, "tools": tools}))
    p = replay_until(["replay", str(f), "--engine", "live", "--a", "9859", "--b", "10001", "--model",
                      str(tiny["gemma2"]), "--jsonl"], '"batch_done"', REPO)
    with reaped(p, strays=lambda: _server_pids(binaries.values())):
        assert _server_pids(binaries.values())
        p.send_signal(signal.SIGINT)
        p.wait(timeout=EXIT_S)
        assert p.returncode == 130
        deadline = time.monotonic() + 60  # a bound on the wait, not a timing assertion
        while _server_pids(binaries.values()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _server_pids(binaries.values()) == []


def test_attach_to_running_server_with_log_file(binaries, tiny, conversation, tmp_path):
    """Attach mode: someone else's server, read through its progress stream and --log-file."""
    from replayer.core.engine.live import LiveServer, attach_events

    log = tmp_path / "server.log"
    knobs = Knobs(memory="swa")
    opts = LiveOptions(binaries[10001], tiny["gemma2"], extra_args=["--log-file", str(log)])
    import httpx

    with LiveServer(opts, knobs, 32768) as srv, httpx.Client() as c:
        srv.wait_healthy(c)
        res = LiveResult()
        evs = list(attach_events("A", parse_build("10001"), knobs, srv.url, conversation, log_file=log, result=res))
    assert not [e for e in evs if isinstance(e, ev.RunFailed)], evs[-1]
    batches = [e for e in evs if isinstance(e, ev.BatchDone)]
    created = [e for e in evs if isinstance(e, ev.CheckpointCreated)]
    sim = Slot(parse_build("10001"), knobs).run(res.layout.prompt_spans())
    assert [(b.start, b.n_tokens) for b in sim.batches] == [(b.start, b.n_tokens) for b in batches]
    assert [c.n_tokens for c in sim.checkpoints] == [c.n_tokens for c in created] and created


def test_attach_to_nothing_fails_clearly(conversation):
    from replayer.core.engine.live import attach_events, free_port

    evs = list(attach_events("A", parse_build("10001"), Knobs(), f"http://127.0.0.1:{free_port()}", conversation))
    assert isinstance(evs[-1], ev.RunFailed) and "no healthy llama-server" in evs[-1].error


def _request_file(tmp_path):
    msgs, tools = agent_conversation(rounds=60, tool_result_words=120)
    f = tmp_path / "req.json"
    f.write_bytes(orjson.dumps({"messages": msgs, "tools": tools}))
    return f


def _live_cli(f, model, *extra):
    return subprocess.run([sys.executable, "-m", "replayer.cli", "replay", str(f), "--engine", "live", "--a", "9859",
                           "--b", "10001", "--model", str(model), *extra, "--json"], capture_output=True, text=True,
                          cwd=REPO, timeout=600)


def test_parallel_runs(binaries, tiny, tmp_path):
    """--parallel-runs runs A and B at once; both finish with their own schedules."""
    r = _live_cli(_request_file(tmp_path), tiny["llama"], "--parallel-runs")
    assert r.returncode == 0, r.stderr
    a, b = orjson.loads(r.stdout)["runs"]
    assert a["error"] is None and b["error"] is None and a["n_batches"] > b["n_batches"]
    assert {b_["reason"] for b_ in b["batches"]} == {"n_batch", "prompt_end"}


def test_calibration_times_the_runs_schedule(binaries, tiny, tmp_path):
    """--calibrate (runs one after the other, as on one GPU) saves a line the simulator then times
    the same schedule with. How well a line predicts is a timing goal, measured on sessions it
    was not fitted on (benchmarks/run.py calib; the flow is test_calibration_live.py)."""
    from replayer.core.calibration import Calibration
    from replayer.core.hardware.cost import batch_ms

    f = _request_file(tmp_path)
    r = _live_cli(f, tiny["llama"], "--calibrate")
    assert r.returncode == 0, r.stderr
    a, b = orjson.loads(r.stdout)["runs"]
    presets = orjson.loads(subprocess.run([sys.executable, "-m", "replayer.cli", "presets", "--json"],
                                          capture_output=True, cwd=REPO).stdout)
    saved = {c["id"]: c for c in presets["calibrations"]}["cpu-llama"]
    # the simulator, timed by that calibration, on the same exact layout (the model's own vocabulary)
    sim = orjson.loads(subprocess.run([sys.executable, "-m", "replayer.cli", "replay", str(f), "--a", "9859", "--b",
                                       "10001", "--calibration", "cpu-llama", "--model", "llama-8b-q4_0",
                                       "--tokenizer", f"gguf:{tiny['llama']}", "--json"], capture_output=True,
                                      cwd=REPO).stdout)
    for live_run, sim_run in zip((a, b), sim["runs"]):
        assert [(x["start"], x["n_tokens"]) for x in sim_run["batches"]] == [
            (x["start"], x["n_tokens"]) for x in live_run["batches"]]
        # every simulated batch is timed by the saved line itself
        line = Calibration(**{k: v for k, v in saved.items() if k != "id"}).line("cpu-llama")
        assert [x["ms"] for x in sim_run["batches"]] == [
            pytest.approx(batch_ms(line, x["start"], x["n_tokens"], 512), abs=1e-3) for x in sim_run["batches"]]


def test_the_servers_own_memory_kind_labels_the_batches(binaries, tiny, conversation):
    """A preset's guess (plain) is wrong for gemma2: the -lv 4 start-up log says SWA, and the
    near-end cuts are labelled checkpoint_offset as the simulator labels them."""
    evs = list(live_events("A", parse_build("10001"), Knobs(memory="plain"), LiveOptions(binaries[10001], tiny["gemma2"]),
                           conversation))
    started = evs[0]
    assert isinstance(started, ev.RunStarted) and started.settings["memory"] == "swa"
    N = started.n_tokens
    offsets = [b.end for b in evs if isinstance(b, ev.BatchDone) and b.reason == "checkpoint_offset"]
    assert offsets == [N - 516, N - 4]
    assert [e for e in evs if isinstance(e, ev.CheckpointCreated)]



# -- deadlines on real servers ----------------------------------------------------------------

def _freeze(procs) -> None:
    for p in procs:
        os.killpg(p.pid, signal.SIGSTOP)


def test_a_frozen_server_hits_the_prefill_deadline(binaries, tiny):
    """A real server stopped (SIGSTOP) after its first batch: the run fails at its wall-clock
    prefill deadline, keeps the batch it saw, and the stopped server is still killed."""
    msgs, tools = agent_conversation(rounds=120, tool_result_words=120)
    res = LiveResult()
    t = time.monotonic()
    evs: list = []
    frozen = False
    for e in live_events("A", parse_build("9859"), Knobs(memory="swa"),
                         LiveOptions(binaries[9859], tiny["gemma2"], request_timeout=10.0),
                         {"messages": msgs, "tools": tools}, result=res):
        evs.append(e)
        if isinstance(e, ev.BatchDone) and not frozen:
            _freeze(live_processes())
            frozen = True
    assert frozen and isinstance(evs[-1], ev.RunFailed)
    assert res.status == "failed: the prefill did not finish within 10 s"
    batches = [e for e in evs if isinstance(e, ev.BatchDone)]
    assert batches and batches[-1].end < evs[0].n_tokens  # the prefill facts seen so far, not more
    assert time.monotonic() - t < 300


def test_attach_to_a_frozen_server_times_out(binaries, tiny, conversation):
    from replayer.core.engine.live import LiveServer, attach_events

    import httpx

    with LiveServer(LiveOptions(binaries[10001], tiny["llama"]), Knobs(), 8192) as srv, httpx.Client() as c:
        srv.wait_healthy(c)
        _freeze([srv.proc])
        res = LiveResult()
        evs = list(attach_events("A", parse_build("10001"), Knobs(), srv.url, conversation, result=res,
                                 health_timeout=1.0))
    assert isinstance(evs[-1], ev.RunFailed)
    assert res.status == f"failed: no healthy llama-server answered at {srv.url} within 1 s"


def test_a_real_generation_failure_keeps_the_prefill(binaries, tiny, conversation):
    """b9859 with the gpt-oss template: the tiny model's first sampled token is not what the
    template's output parser expects, and the stream ends with an error event after the
    prefill. The run's status says so; its prefill facts (batches, checkpoints, time) stand."""
    from replayer.core.compare import compare

    tpl = REPO / "replayer" / "data" / "templates" / "gpt-oss.jinja"
    res = LiveResult()
    knobs = Knobs(memory="plain")
    evs = list(live_events("B", parse_build("9859"), knobs,
                           LiveOptions(binaries[9859], tiny["llama"], extra_args=["--chat-template-file", str(tpl)]),
                           conversation, result=res))
    fin = evs[-1]
    assert isinstance(fin, ev.RunFinished), fin
    assert fin.status.startswith("prefill complete, generation failed: llama-server reported an error: The model "
                                 "produced output that does not match the expected")
    batches = [e for e in evs if isinstance(e, ev.BatchDone)]
    sim = Slot(parse_build("9859"), knobs).run(res.layout.prompt_spans())
    assert [(b.start, b.n_tokens) for b in sim.batches] == [(b.start, b.n_tokens) for b in batches]
    assert res.progress[-1] == fin.n_tokens == fin.n_processed and fin.prompt_ms > 0 and fin.tokens_per_s > 0
    ok, _, _ = _run(binaries, tiny, conversation, 9859, "llama")
    cmp = compare(ok + evs)
    assert cmp.comparable and cmp.speedup > 0
    assert cmp.verdict().endswith(f"(run B: {fin.status})")
