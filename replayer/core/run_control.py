"""How A and B are run, one way for every front end: in which order, paced how, paused, cancelled.

Why: the app's screens used to sequence their own runs (live B started when A's worker ended,
the simulated ones paced on the event loop, pause and cancel written against their workers)
beside the orchestrator's own A-then-B loop, and the two could drift. ``run_pair`` is now the one
sequence: the CLI calls it without ``Controls`` (A then B, or both at once with
``--parallel-runs`` on real servers; ``--speed`` paces a simulated stream); a front end that
watches the runs passes ``Controls``, its pause, speed and cancel buttons, and renders the events
it is handed. A watched simulated replay runs A and B side by side (each paced by its own
modelled clock), as the panes show them; real servers still go one after the other unless
``parallel_runs``. Every run then has a thread of its own, so cancelling one stops only the
server that run's thread started.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Iterator

from replayer.core.engine import events as ev
from replayer.core.prepare import RUNS
EventSink = Callable[[ev.Event], None]
STEP_S = 0.05  # the longest a paced or paused run goes without looking at its controls
STOP_AGAIN_S = (0.3, 1.0, 3.0)  # a cancelled live run's server is stopped again: its thread may be starting one


class _Cancelled(Exception):
    pass


class Controls:
    """What a watcher does to running replays: ``speed`` (modelled time ÷ speed; 0 instant),
    pause and resume (a simulated run waits; a real server cannot, its events still come), and
    cancel one run or both (the run ends with ``RunFailed("cancelled")``, its server stopped at
    once). Read by the runs' threads between events; set from any thread."""

    def __init__(self, speed: float = 0.0) -> None:
        self.speed = speed
        self._running = threading.Event()
        self._running.set()
        self._cancelled: set[str] = set()
        self._threads: dict[str, int] = {}  # run → the thread running it (its servers are that thread's)

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    def pause(self) -> None:
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    def cancelled(self, run: str) -> bool:
        return run in self._cancelled

    def cancel(self, run: str | None = None) -> None:
        """Cancel ``run`` (None: both). A live run's thread only sees it between events, so its
        server is stopped now, off the caller's thread, and again while the thread may still be
        starting one."""
        for r in RUNS if run is None else (run,):
            self._cancelled.add(r)
            ident = self._threads.get(r)
            if ident is not None:
                threading.Thread(target=self._stop_servers, args=(r, ident), daemon=True).start()

    def _stop_servers(self, run: str, ident: int) -> None:
        from replayer.core.processes import stop_started_by

        stop_started_by(ident)
        for delay in STOP_AGAIN_S:
            time.sleep(delay)
            if self._threads.get(run) != ident:  # the run is over (its thread's id may be reused)
                return
            stop_started_by(ident)

    def watch(self, run: str, stream: Iterator[ev.Event], paced: bool) -> Iterator[ev.Event]:
        """``stream`` under these controls: paced when ``paced`` (a simulated run), ended by a
        cancel, and a failure of the run's code shown as its ``RunFailed`` (the other run goes on)."""
        self._threads[run] = threading.get_ident()
        events = self._paced(stream, run) if paced else stream
        try:
            if self.cancelled(run):  # cancelled before it started (a live B waiting for A)
                raise _Cancelled
            for e in events:
                yield e
                if self.cancelled(run):
                    raise _Cancelled
        except _Cancelled:
            yield ev.RunFailed(run=run, error="cancelled")
        except Exception as exc:  # a failing run is shown, never lost with its thread
            yield ev.RunFailed(run=run, error=f"{type(exc).__name__}: {exc}")
        finally:
            for it in (events, stream):
                close = getattr(it, "close", None)
                if close is not None:
                    close()  # a live run's generator stops its server
            self._threads.pop(run, None)

    def _paced(self, events: Iterator[ev.Event], run: str) -> Iterator[ev.Event]:
        """Events at their ``t_ms`` ÷ the current speed; held while paused (the pace restarts at
        the resume); a change of speed applies from the next event."""
        sim_t, wall = 0.0, time.monotonic()
        for e in events:
            while True:
                if run in self._cancelled:
                    raise _Cancelled
                if not self._running.is_set():
                    self._running.wait(STEP_S)
                    wall = time.monotonic()
                    continue
                s = self.speed
                if s <= 0:
                    break
                delay = wall + (e.t_ms - sim_t) / 1000.0 / s - time.monotonic()
                if delay <= 0:
                    break
                time.sleep(min(delay, STEP_S))
            s = self.speed
            if s > 0 and e.t_ms > sim_t:
                wall += (e.t_ms - sim_t) / 1000.0 / s
                sim_t = e.t_ms
            elif s <= 0:
                sim_t, wall = e.t_ms, time.monotonic()
            yield e


def _speed_paced(stream: Iterator[ev.Event], speed: float | None) -> Iterator[ev.Event]:
    if not speed:
        return stream
    from replayer.core.engine.simulate import paced

    return paced(stream, speed)


def run_pair(stream_of: Callable[[str], Iterator[ev.Event]], on_event: EventSink | None = None, *,
             realtime: bool, parallel: bool = False, speed: float | None = None, controls: Controls | None = None,
             keep: bool = True) -> dict[str, list[ev.Event]]:
    """Run A and B (``stream_of(run)``: a run's events), each event handed to ``on_event`` as it
    comes; returns each run's events (none kept without ``keep``: the watcher holds them).

    ``realtime``: the events come from real servers (never paced); ``parallel``: two real servers
    at once. Without ``controls``: A then B on this thread (``speed`` paces a simulated stream), or
    two threads for parallel servers. With ``controls``: a thread per run; simulated runs at once.
    """
    out: dict[str, list[ev.Event]] = {run: [] for run in RUNS}
    lock = threading.Lock()

    def one(run: str) -> None:
        stream = stream_of(run)
        if controls is not None:
            stream = controls.watch(run, stream, paced=not realtime)
        elif not realtime:
            stream = _speed_paced(stream, speed)
        for e in stream:
            if keep:
                out[run].append(e)
            if on_event is not None:
                with lock:
                    on_event(e)

    at_once = (realtime and parallel) or (controls is not None and not realtime)
    try:
        if at_once or controls is not None:
            threads = [threading.Thread(target=one, args=(run,), name=f"replayer-run-{run}") for run in RUNS]
            for t in threads:
                t.start()
                if not at_once:
                    t.join()  # one real server at a time, as the CLI runs them
            for t in threads:
                t.join()
        else:
            for run in RUNS:
                one(run)
    except KeyboardInterrupt:
        if realtime:
            from replayer.core.processes import stop_all

            stop_all()
        raise
    return out
