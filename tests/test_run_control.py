"""The one sequence of A and B (core/run_control.run_pair) and a watcher's controls: pause, speed
and cancel are parameters of the orchestrator, not of a screen's workers."""

from __future__ import annotations

import threading
import time

import pytest

from replayer.core.engine import events as ev
from replayer.core.pipeline import Replay
from replayer.core.replay import ReplayConfig, demo_session_path, prepare, run_events
from replayer.core.run_control import Controls, run_pair

from conftest import FIXTURES


@pytest.fixture(scope="module")
def prep():
    return prepare(demo_session_path(), ReplayConfig())


def _started(target) -> threading.Thread:
    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t


def _fake(run: str, barrier: threading.Barrier | None = None, fail: bool = False):
    """A run of three events; with ``barrier`` it only gets past its first event when the other
    run is running at the same time (else the barrier breaks and the run fails)."""
    yield ev.RunStarted(run=run, label=run, build="b1", generation="g", engine="live", n_tokens=10)
    if barrier is not None:
        barrier.wait(timeout=5)
    if fail:
        raise RuntimeError("the engine broke")
    yield ev.RunFinished(run=run, n_tokens=10, n_processed=10, prompt_ms=1.0, tokens_per_s=1e4, n_batches=1,
                         n_checkpoints=0, t_ms=1.0)


def test_paused_a_simulated_replay_waits_and_resumed_it_gives_the_cores_events(prep):
    controls = Controls(speed=0.0)
    controls.pause()
    got: list[ev.Event] = []
    t = _started(lambda: run_pair(lambda run: run_events(prep, run), got.append, realtime=False,
                                  controls=controls, keep=False))
    time.sleep(0.3)
    assert got == [], "paused: no simulated event is released"
    controls.resume()
    t.join(timeout=60)
    assert not t.is_alive()
    for run in ("A", "B"):
        assert [e for e in got if e.run == run] == list(run_events(prep, run))


def test_a_paced_run_is_released_in_modelled_time_divided_by_the_speed(prep):
    """A lower bound only (a loaded machine may be slower, never faster than the pace)."""
    last = list(run_events(prep, "A"))[-1].t_ms
    speed = last / 1000 / 0.5  # the whole run in half a second
    t0 = time.monotonic()
    out = run_pair(lambda run: run_events(prep, run), realtime=False, controls=Controls(speed=speed))
    assert time.monotonic() - t0 >= 0.5 * 0.95
    assert out["A"] == list(run_events(prep, "A"))


def test_cancel_ends_one_run_and_the_other_goes_on(prep):
    controls = Controls(speed=0.0)
    controls.pause()
    got: list[ev.Event] = []
    t = _started(lambda: run_pair(lambda run: run_events(prep, run), got.append, realtime=False, controls=controls))
    time.sleep(0.1)
    controls.cancel("A")
    controls.resume()
    t.join(timeout=60)
    a = [e for e in got if e.run == "A"]
    assert [type(e) for e in a] == [ev.RunFailed] and a[0].error == "cancelled"
    assert [e for e in got if e.run == "B"] == list(run_events(prep, "B"))


def test_a_run_whose_code_fails_is_its_run_failed_and_the_other_finishes():
    out = run_pair(lambda run: _fake(run, fail=run == "A"), realtime=True, controls=Controls())
    assert out["A"][-1] == ev.RunFailed(run="A", error="RuntimeError: the engine broke")
    assert isinstance(out["B"][-1], ev.RunFinished)


@pytest.mark.parametrize("realtime,parallel,at_once", [
    (True, False, False),  # real servers: one after the other, as the CLI runs them
    (True, True, True),  # --parallel-runs
    (False, False, True),  # a watched simulated replay: side by side
])
def test_the_orchestrator_decides_which_runs_go_at_once(realtime, parallel, at_once):
    barrier = threading.Barrier(2)
    out = run_pair(lambda run: _fake(run, barrier if at_once else None), realtime=realtime, parallel=parallel,
                   controls=Controls())
    assert [type(out[run][-1]) for run in "AB"] == [ev.RunFinished, ev.RunFinished]
    if not at_once:  # proof that B waited: the same barrier would have broken
        order: list[str] = []
        run_pair(lambda run: _fake(run), lambda e: order.append(e.run), realtime=realtime, controls=Controls())
        assert order == ["A", "A", "B", "B"]


def test_a_cancelled_run_that_had_not_started_never_starts():
    started: list[str] = []

    def stream_of(run):
        started.append(run)  # the run's code begins (a live run: its server starts)
        yield from _fake(run)

    controls = Controls()
    controls.cancel("B")
    out = run_pair(stream_of, realtime=True, controls=controls)
    assert isinstance(out["A"][-1], ev.RunFinished)
    assert out["B"] == [ev.RunFailed(run="B", error="cancelled")] and started == ["A"]


@pytest.mark.parametrize("mode", ["resume", "session"])
def test_the_stream_a_watcher_renders_is_the_runs_of_the_report(mode):
    """``Replay.stream`` (the app's) hands over the events ``Replay.run`` (the CLI's) reports on."""
    path = FIXTURES / "claude-code/small.jsonl"
    seen: list[ev.Event] = []
    Replay(path, ReplayConfig(), mode=mode).stream(seen.append, Controls(speed=0.0))
    cli: list[ev.Event] = []
    Replay(path, ReplayConfig(), mode=mode).run(on_event=cli.append)
    for run in "AB":
        assert [e for e in seen if e.run == run] == [e for e in cli if e.run == run]
