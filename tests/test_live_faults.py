"""Fault tests of the live engine: servers that lie, stall, cut streams or fork, and replayer
itself being killed. Each must end with a clear status, never a run reported complete that was
not, no process left behind (by process group/session and by an inherited environment tag),
and within its deadline.

The misbehaving servers are ``fake_llama_server`` (in-process, or as a fake ``llama-server``
binary); the same checks against real builds are in ``test_live.py``.
"""

from __future__ import annotations

import csv
import io
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest

from conftest import REPO
from fake_llama_server import FakeServer, write_binary
from helpers import EXIT_S, read_line, reaped, replay_until
from replayer.core import export
from replayer.core.builds.catalog import parse_build
from replayer.core.compare import compare
from replayer.core.engine import events as ev
from replayer.core import processes
from replayer.core.engine.live import LiveOptions, LiveResult, attach_events, live_events, live_processes
from replayer.core.engine.schedule import Knobs

BODY = {"messages": [{"role": "system", "content": "You are terse. " * 20},
                     {"role": "user", "content": "read the file please " * 15},
                     {"role": "assistant", "content": "done " * 10},
                     {"role": "user", "content": "and now the next one " * 15}]}
SLACK_S = 10.0  # a deadline is kept when the run ends within it plus this (a loaded 2-core machine)


def _attach(scenario: str, **kw) -> tuple[list[ev.Event], LiveResult, float]:
    res = LiveResult()
    t = time.monotonic()
    with FakeServer(scenario) as srv:
        evs = list(attach_events("A", parse_build("9859"), Knobs(), srv.url, BODY, result=res, **kw))
    return evs, res, time.monotonic() - t


def _tagged(tag: str) -> list[int]:
    """Processes whose environment carries ``tag`` (everything a test's server forked inherits it)."""
    needle = tag.encode()
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                if needle in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                    out.append(int(pid))
            except OSError:
                continue
    return out


def _gone(tag: str, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while _tagged(tag) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _tagged(tag)


@pytest.fixture
def tag(monkeypatch):
    value = f"REPLAYER_FAULT_TEST={os.getpid()}-{os.urandom(4).hex()}"
    monkeypatch.setenv(*value.split("=", 1))
    yield value
    assert _gone(value), f"processes left behind: {_tagged(value)}"
    assert live_processes() == []


# -- every reply checked, every outcome a status (attach mode, in-process fake) -----------------

@pytest.mark.parametrize("scenario,status,detail", [
    ("ok", "complete", None),
    ("eof_early", "failed: ", "ended without [DONE]"),
    ("error_midway", "failed: ", "reported an error: boom in the middle"),
    ("bad_json", "failed: ", "stream event that is not JSON"),
    ("progress_nan", "failed: ", "prompt_progress.processed: Input should be a valid integer (got 'lots')"),
    ("http500_list", "failed: ", "answered HTTP 500: [{\"error\": \"a list, not an object\"}, 2]"),
    ("props_list", "failed: ", "malformed /props reply: Input should be an object"),
    ("template_not_json", "failed: ", "/apply-template reply that is not JSON"),
    ("eof_after_prefill", "prefill complete, generation failed: ", "ended without [DONE]"),
    ("error_after_prefill", "prefill complete, generation failed: ", "does not match the expected format"),
])
def test_each_reply_fault_ends_with_its_status(scenario, status, detail):
    evs, res, _ = _attach(scenario)
    last = evs[-1]
    assert res.status.startswith(status) and (detail is None or detail in res.status), res.status
    assert sum(isinstance(e, (ev.RunFinished, ev.RunFailed)) for e in evs) == 1
    if status.startswith("failed"):
        assert isinstance(last, ev.RunFailed) and last.status == res.status and "\n" not in last.error
    else:
        # the prefill facts stand: every batch up to the prompt's end, a time and a speed
        assert isinstance(last, ev.RunFinished) and last.status == res.status
        batches = [e for e in evs if isinstance(e, ev.BatchDone)]
        assert batches[-1].end == last.n_tokens == res.progress[-1] and last.prompt_ms > 0 and last.tokens_per_s > 0


@pytest.mark.parametrize("scenario", ["keepalive", "silent_stream"])
def test_a_stalled_prefill_ends_at_its_wall_clock_deadline(scenario):
    """A ``: keepalive`` every 0.2 s defeats any per-read timeout; the wall clock does not."""
    evs, res, took = _attach(scenario, timeout=1.5)
    assert isinstance(evs[-1], ev.RunFailed) and res.status == "failed: the prefill did not finish within 1.5 s"
    assert took < 1.5 + SLACK_S


def test_attach_to_a_server_that_never_answers():
    evs, res, took = _attach("silent", health_timeout=1.0)
    assert isinstance(evs[-1], ev.RunFailed) and "no healthy llama-server answered" in res.status
    assert "within 1 s" in res.status and took < 1.0 + SLACK_S


def test_the_run_deadline_caps_every_phase():
    evs, res, took = _attach("keepalive", timeout=600, run_timeout=1.5)
    assert res.status.startswith("failed: the run did not finish within its 1.5 s deadline")
    assert "prefill" in res.status and took < 1.5 + SLACK_S


# -- the status in the comparison and in every export --------------------------------------

def test_no_speedup_from_a_run_that_did_not_finish_its_prefill():
    a, _, _ = _attach("error_after_prefill")
    b, _, _ = _attach("eof_early")
    b = [dataclass_with_run(e, "B") for e in b]
    cmp = compare(a + b)
    assert not cmp.comparable and cmp.speedup == 0.0
    assert "no speed-up" in cmp.verdict() and "run B failed: the stream ended without [DONE]" in cmp.verdict()
    doc = orjson.loads(export.to_json(cmp))
    assert doc["comparison"]["speedup"] is None
    assert doc["runs"][0]["status"].startswith("prefill complete, generation failed: llama-server reported an error")
    assert doc["runs"][1]["status"] == "failed: the stream ended without [DONE]"
    assert doc["comparison"]["status"] == {"A": doc["runs"][0]["status"], "B": doc["runs"][1]["status"]}
    md = export.to_markdown(cmp)
    assert "- status: A = prefill complete, generation failed: " in md and "B = failed: the stream ended" in md
    assert "no speed-up" in md and "| status |" in md
    rows = list(csv.DictReader(io.StringIO(export.to_csv(cmp))))
    assert {r["run_status"] for r in rows if r["run"] == "A"} == {doc["runs"][0]["status"]}
    assert {r["run_status"] for r in rows if r["run"] == "B"} == {doc["runs"][1]["status"]}
    assert "no speed-up" in export.to_text(cmp)
    jsonl = [orjson.loads(ev.to_json(e)) for e in a + b]
    assert [d["status"] for d in jsonl if d["type"] in ("run_finished", "run_failed")] == [
        doc["runs"][0]["status"], doc["runs"][1]["status"]]


def test_a_generation_failure_keeps_the_speedup_and_says_so():
    a, _, _ = _attach("ok")
    b = [dataclass_with_run(e, "B") for e in _attach("error_after_prefill")[0]]
    cmp = compare(a + b)
    assert cmp.comparable and cmp.speedup > 0
    v = cmp.verdict()
    assert "no speed-up" not in v and "run B: prefill complete, generation failed:" in v
    assert orjson.loads(export.to_json(cmp))["comparison"]["speedup"] == pytest.approx(cmp.speedup, rel=1e-3)


def test_a_run_without_an_end_event_is_not_complete():
    a, _, _ = _attach("ok")
    cut = [e for e in a if not isinstance(e, ev.RunFinished)]
    cmp = compare(cut + [dataclass_with_run(e, "B") for e in a])
    assert cmp.a.status.startswith("failed:") and not cmp.comparable


def dataclass_with_run(e: ev.Event, run: str) -> ev.Event:
    import dataclasses

    return dataclasses.replace(e, run=run) if not isinstance(e, ev.RunFailed) else ev.RunFailed(run, e.error, e.t_ms)


# -- own-server mode: fake binaries; no process survives ---------------------------------------

def _own(tmp_path: Path, scenario: str, **kw) -> tuple[list[ev.Event], LiveResult, float]:
    binary = write_binary(tmp_path / "llama-server", scenario)
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    res = LiveResult()
    t = time.monotonic()
    evs = list(live_events("A", parse_build("9859"), Knobs(), LiveOptions(binary, model, **kw), BODY, result=res))
    return evs, res, time.monotonic() - t


def test_own_server_keepalive_trickle_hits_the_prefill_deadline(tmp_path, tag):
    evs, res, took = _own(tmp_path, "keepalive", request_timeout=1.5)
    assert isinstance(evs[0], ev.RunStarted) and isinstance(evs[-1], ev.RunFailed)
    assert res.status == "failed: the prefill did not finish within 1.5 s" and took < 1.5 + SLACK_S


def test_own_server_error_after_prefill_keeps_the_prefill(tmp_path, tag):
    evs, res, _ = _own(tmp_path, "error_after_prefill")
    assert isinstance(evs[-1], ev.RunFinished) and res.status.startswith("prefill complete, generation failed:")


def test_own_server_silent_hits_the_start_deadline(tmp_path, tag):
    evs, res, took = _own(tmp_path, "silent", start_timeout=1.0)
    assert isinstance(evs[-1], ev.RunFailed) and "did not become healthy within 1 s" in res.status
    assert took < 1.0 + SLACK_S


HEALTH_LATE = "llama-server did not become healthy within 2 s (it answered, but its model did not finish loading)"


def test_own_server_never_healthy_fails_at_the_timeout(tmp_path, tag):
    """The start-up is inside ``--timeout`` (the driver's ``ready_seconds``): a server that answers
    but never loads its model fails at the 2 s of the timeout, not at the health phase's 120 s."""
    evs, res, took = _own(tmp_path, "loading", request_timeout=2.0)
    assert [type(e) for e in evs] == [ev.RunFailed] and res.status == f"failed: {HEALTH_LATE}"
    assert took < 2.0 + SLACK_S


@pytest.mark.parametrize("mode", ["resume", "session"])
def test_replay_timeout_bounds_a_server_that_never_becomes_healthy(tmp_path, tag, mode):
    """``replay --engine live --timeout 2`` in both modes (one driver for both): each run fails with
    the one line naming the start-up, exit 1, no traceback."""
    runs = _replay_with_timeout_2(tmp_path, "loading", mode)
    assert [run["error"] for run in runs] == [HEALTH_LATE, HEALTH_LATE]


def _replay_with_timeout_2(tmp_path, scenario: str, mode: str) -> list[dict]:
    """``replay --engine live --timeout 2 --json`` with the fake server in ``scenario`` as A and B:
    its runs, after checking it exits 1 without a traceback."""
    binary = write_binary(tmp_path / "llama-server", scenario)
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    r = subprocess.run([sys.executable, "-m", "replayer.cli", "replay", str(REPO / "fixtures/pi/small-v3.jsonl"),
                        "--mode", mode, "--engine", "live", "--a", str(binary), "--b", str(binary), "--model",
                        str(model), "--timeout", "2", "--json"], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    return orjson.loads(r.stdout)["runs"]


LAYOUT_LATE = ("the server did not lay out the prompt (/apply-template, /tokenize) within the 2 s of --timeout "
               "(its start-up counted in)")


def test_own_server_layout_is_inside_the_timeout(tmp_path, tag):
    """The layout phase's own limit (120 s) is capped by ``--timeout``: a server that is healthy but
    never answers ``/apply-template`` fails at the 2 s of the timeout, counted from its start."""
    evs, res, took = _own(tmp_path, "slow_layout", request_timeout=2.0)
    assert [type(e) for e in evs] == [ev.RunFailed] and res.status == f"failed: {LAYOUT_LATE}"
    assert took < 2.0 + SLACK_S


def test_attach_layout_is_inside_the_timeout():
    evs, res, took = _attach("slow_layout", timeout=1.5)
    assert [type(e) for e in evs] == [ev.RunFailed]
    assert res.status == "failed: the server did not lay out the prompt (/apply-template, /tokenize) within the " \
                         "1.5 s of --timeout" and took < 1.5 + SLACK_S


@pytest.mark.parametrize("mode", ["resume", "session"])
def test_replay_timeout_bounds_a_layout_that_never_ends(tmp_path, tag, mode):
    """``replay --engine live --timeout 2`` against a server that never lays the prompt out: one
    deadline for start-up, layout and prefill in both modes; each run fails with the one line."""
    t = time.monotonic()
    runs = _replay_with_timeout_2(tmp_path, "slow_layout", mode)
    assert [run["error"] for run in runs] == [LAYOUT_LATE, LAYOUT_LATE]
    assert time.monotonic() - t < 2 * 2.0 + 2 * SLACK_S


def test_a_binary_that_forks_and_never_answers_leaves_nothing(tmp_path, tag):
    """The child ignores SIGINT and sits in its own process group, the parent never answers:
    the start deadline ends the run and the stop reaches both (group + session sweep)."""
    binary = tmp_path / "llama-server"
    binary.write_text("#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'version: 9859 (fake)'; exit 0; fi\n"
                      "sh -c 'trap \"\" INT; exec sleep 300' &\n"
                      f"{sys.executable} -c 'import os, time; os.setpgid(0, 0); time.sleep(300)' &\n"
                      "trap '' INT\nsleep 300\n")
    binary.chmod(0o755)
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    seen: list[int] = []

    def spy():
        while not seen:
            seen.extend(_tagged(tag))
            time.sleep(0.05)

    threading.Thread(target=spy, daemon=True).start()
    t = time.monotonic()
    evs = list(live_events("A", parse_build("9859"), Knobs(), LiveOptions(binary, model, start_timeout=1.5), BODY))
    assert isinstance(evs[-1], ev.RunFailed) and "did not become healthy within 1.5 s" in evs[-1].error
    assert seen and _gone(tag, within=0.5)
    assert time.monotonic() - t < 1.5 + SLACK_S


def test_stop_reaches_a_child_after_its_parent_is_gone(tmp_path, tag):
    proc = subprocess.Popen(["sh", "-c", "sh -c 'trap \"\" INT; exec sleep 300' & exit 0"], start_new_session=True)
    processes.register(proc)
    proc.wait()
    deadline = time.monotonic() + 5
    while not processes.members(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert processes.members(proc.pid), "the orphan child should still be in the session"
    assert live_processes() == [proc]
    processes.stop_all()
    assert processes.members(proc.pid) == []


def test_stop_all_signals_every_server_before_it_waits_for_any(tmp_path, tag):
    """Three "servers" that each finish their SIGINT shutdown only once all three were told (a
    marker file each): signalled one after the other with a grace each, the first would wait
    its whole grace for the others and be SIGKILLed; signalled together, all exit on their own.
    The grace is generous, so the test asserts how they ended, never how long it took."""
    told = tmp_path / "told"
    told.mkdir()
    script = ('trap \'touch "$1/told/$2"; while [ "$(ls "$1/told" | wc -l)" -lt 3 ]; do sleep 0.05; done; exit 0\' INT\n'
              'touch "$1/ready-$2"\nwhile :; do sleep 0.05; done\n')
    procs = [subprocess.Popen(["sh", "-c", script, "sh", str(tmp_path), str(k)], start_new_session=True)
             for k in range(3)]
    for proc in procs:
        processes.register(proc)
    deadline = time.monotonic() + 60  # a bound on the wait for the traps, not a timing assertion
    while len(list(tmp_path.glob("ready-*"))) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    processes.stop_all(grace=60)
    assert [proc.returncode for proc in procs] == [0, 0, 0]  # each ended its own shutdown; none was killed
    assert sorted(x.name for x in told.iterdir()) == ["0", "1", "2"]
    assert live_processes() == []


def test_a_failing_signal_test_still_reaps_its_child_and_the_servers_it_started(tag):
    """The finalizer the SIGINT tests run their ``replayer`` child under: an assertion failing
    inside it still takes the child and the server it started in a session of its own (no
    longer in the child's group, and not tied to it) down with it."""
    code = ("import subprocess, sys, time\n"
            "print(subprocess.Popen(['sleep', '300'], start_new_session=True).pid, flush=True)\n"
            "time.sleep(300)\n")
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    with pytest.raises(AssertionError, match="mid-test"):
        with reaped(child):
            server = int(read_line(child.stdout))
            assert server in _tagged(tag) and os.getsid(server) == server != os.getsid(child.pid)
            raise AssertionError("mid-test")
    assert child.returncode == -signal.SIGKILL
    assert _gone(tag, within=30.0), f"left behind: {_tagged(tag)}"


# -- the replayer process itself killed ----------------------------------------------------------

@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_signals_to_the_replayer_stop_its_servers(tmp_path, tag, sig):
    binary = write_binary(tmp_path / "llama-server", "keepalive")
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    req = tmp_path / "req.json"
    req.write_bytes(orjson.dumps(BODY))
    p = replay_until(["replay", str(req), "--engine", "live", "--a", str(binary), "--b", str(binary), "--model",
                      str(model), "--jsonl"], '"run_started"', REPO)
    with reaped(p, strays=lambda: _tagged(tag)):
        servers = [pid for pid in _tagged(tag) if pid != p.pid]
        assert servers, "the fake server should be running"
        p.send_signal(sig)
        rc = p.wait(timeout=EXIT_S)
        err = p.stderr.read()
        assert rc == 128 + sig, err
        name = {signal.SIGINT: "interrupted"}.get(sig, f"terminated by {signal.Signals(sig).name}")
        assert err.strip().splitlines()[-1] == f"replayer: {name}"
        assert _gone(tag, within=30.0), f"left behind: {_tagged(tag)}"


def test_a_cancelled_attach_run_leaves_no_reader_thread():
    """Closing the generator (the app's cancel) cuts the stream: no thread keeps reading."""
    with FakeServer("keepalive") as srv:
        before = set(threading.enumerate())
        gen = attach_events("A", parse_build("9859"), Knobs(), srv.url, BODY)
        assert isinstance(next(gen), ev.RunStarted)
        time.sleep(0.5)
        gen.close()
        deadline = time.monotonic() + 5
        while set(threading.enumerate()) - before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert set(threading.enumerate()) - before == set()


def test_a_server_left_running_is_stopped_at_interpreter_exit(tmp_path, tag):
    """The app quitting (or any caller forgetting ``stop``) ends the interpreter: ``atexit`` stops
    the server and its group."""
    binary = write_binary(tmp_path / "llama-server", "ok")
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    code = ("import sys, httpx; from pathlib import Path\n"
            "from replayer.core.engine.live import LiveOptions, LiveServer\n"
            "from replayer.core.engine.schedule import Knobs\n"
            f"s = LiveServer(LiveOptions(Path({str(binary)!r}), Path({str(model)!r})), Knobs(), 4096)\n"
            "s.start(); s.wait_healthy(httpx.Client())\n"
            "print(s.proc.pid, flush=True)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert r.returncode == 0, r.stderr
    assert int(r.stdout.split()[0]) > 0
    assert _gone(tag, within=5.0)


def test_cancelling_a_watched_live_run_stops_its_server_and_not_the_others(tmp_path, tag):
    """The orchestrator's cancel (``run_control.Controls``, the app's ``a`` key): run A's server,
    stuck in a prefill that never ends, is stopped at once; A ends ``cancelled``, B finishes.
    (Run alone, the template sandbox's worker starts inside the test and carries its tag.)"""
    from replayer.core.run_control import Controls, run_pair

    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    binaries = {"A": write_binary(tmp_path / "stuck-server", "keepalive"), "B": write_binary(tmp_path / "ok-server", "ok")}
    controls = Controls()
    started = threading.Event()

    def on_event(e):
        if e.run == "A" and isinstance(e, ev.RunStarted):
            started.set()

    def stream_of(run):
        return live_events(run, parse_build("9859"), Knobs(), LiveOptions(binaries[run], model), BODY)

    out: dict = {}
    t = threading.Thread(target=lambda: out.update(run_pair(stream_of, on_event, realtime=True, parallel=True,
                                                             controls=controls)), daemon=True)
    t.start()
    assert started.wait(60), "run A's server should be up"
    controls.cancel("A")
    t.join(timeout=60)
    assert not t.is_alive()
    assert out["A"][-1] == ev.RunFailed(run="A", error="cancelled")
    assert isinstance(out["B"][-1], ev.RunFinished) and out["B"][-1].status == "complete"
