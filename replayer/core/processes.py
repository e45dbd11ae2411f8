"""The servers this process started, and the guarantee that none outlives it.

Each server starts in a session of its own (``start_new_session``: its pid is the id of its
process group and session), so a stop reaches everything it forked: SIGINT to the group
(llama-server's clean shutdown), SIGKILL to what is left after a short grace period, and a
``/proc`` sweep of the session for a child that moved to a group of its own. ``stop_all``
(all servers signalled at once, one grace period for all of them) runs at interpreter exit,
and ``stop_on_signals`` turns SIGTERM and SIGHUP into the same unwinding as Ctrl-C, so an
exception, a signal or quitting the app all end with no server left.

A death replayer never sees coming (SIGKILL, the OOM killer, a library user's process ending on
a SIGTERM without ``stop_on_signals``) runs none of that, so ``spawn`` also has the kernel kill
each child when replayer dies (``core/children``: ``PR_SET_PDEATHSIG`` from one long-lived
thread).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Iterator

from replayer.core import children

GRACE_S = 3.0  # llama-server stops within a batch of SIGINT; then SIGKILL

_LIVE: set[subprocess.Popen] = set()
_LIVE_LOCK = threading.Lock()


class Terminated(KeyboardInterrupt):
    """SIGTERM/SIGHUP, unwound like Ctrl-C (every ``finally`` runs, every server stops)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
        self.exit_code = 128 + signum
        self.reason = f"terminated by {signal.Signals(signum).name}"


_OWNER: dict[subprocess.Popen, int] = {}  # server → the thread that started it (a run's worker)


def register(proc: subprocess.Popen) -> None:
    with _LIVE_LOCK:
        _LIVE.add(proc)
        _OWNER[proc] = threading.get_ident()


def stop_started_by(thread_id: int, grace: float = 0.5) -> int:
    """Stop the servers one run's thread started (cancelling that run, not the other one);
    the run's own generator then ends with a ``RunFailed``. Returns how many were stopped."""
    with _LIVE_LOCK:
        mine = [p for p in _LIVE if _OWNER.get(p) == thread_id and p.poll() is None]
    stop_many(mine, grace=grace)
    return len(mine)


def live_processes() -> list[subprocess.Popen]:
    with _LIVE_LOCK:
        return [p for p in _LIVE if p.poll() is None or members(p.pid)]


def members(sid: int) -> list[int]:
    """Live processes in the process group or session ``sid`` (a server and all it forked)."""
    return members_of([sid])[sid]


def proc_stats() -> Iterator[tuple[int, int, int, int]]:
    """(pid, ppid, process group, session) of every process in ``/proc`` that is not a zombie."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp session …; comm may hold spaces and parentheses
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 3 and fields[0] != "Z":
            yield int(entry.name), int(fields[1]), int(fields[2]), int(fields[3])


def members_of(sids: list[int]) -> dict[int, list[int]]:
    """``members`` for several groups/sessions in one pass over ``/proc`` (a stop of N servers
    polls them together, not N scans a poll)."""
    wanted = set(sids)
    out: dict[int, list[int]] = {sid: [] for sid in sids}
    for pid, _, pgrp, session in proc_stats():
        for sid in {pgrp, session} & wanted:
            out[sid].append(pid)
    return out


def _kill_all(sid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(sid, sig)
    for pid in members(sid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def stop(proc: subprocess.Popen, grace: float = GRACE_S) -> None:
    """Stop a server and everything it started; returns when none of them is left (or ~grace+5 s)."""
    stop_many([proc], grace)


def _wait_all(procs: list[subprocess.Popen], deadline: float) -> None:
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=max(0.0, deadline - time.monotonic()))


def stop_many(procs: list[subprocess.Popen], grace: float = GRACE_S) -> None:
    """Stop several servers together: SIGINT to all of them first, then one shared grace period,
    then SIGKILL to all that are left. Stopping them one after the other would make Ctrl-C with
    N servers wait up to N graces (each one's batch ends while the others have not been told yet);
    together it is one grace whatever N is."""
    procs = list(procs)
    running = [p for p in procs if p.poll() is None]
    for p in running:
        _kill_all(p.pid, signal.SIGINT)
    _wait_all(running, time.monotonic() + grace)
    # a leader may be gone while a child it forked (say, one that ignores SIGINT) lives on
    left = members_of([p.pid for p in procs])
    stuck = [p for p in procs if p.poll() is None or left[p.pid]]
    for p in stuck:
        _kill_all(p.pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    _wait_all(stuck, deadline)
    sids = [p.pid for p in stuck]
    while sids and time.monotonic() < deadline:
        left = members_of(sids)
        sids = [sid for sid in sids if left[sid]]
        if sids:
            time.sleep(0.02)
    with _LIVE_LOCK:
        for p in procs:
            _LIVE.discard(p)
            _OWNER.pop(p, None)


def spawn(cmd: list[str], death_signal: int = signal.SIGKILL, **kwargs: Any) -> subprocess.Popen:
    """``Popen(cmd, start_new_session=True, **kwargs)`` whose child gets ``death_signal`` from
    the kernel when this process dies, however it dies (Linux; elsewhere a plain ``Popen``).

    The signal reaches that one process, not what it forks: a command that forks a tree runs
    under ``tree_guard``, which passes the death on to its whole group."""
    kwargs["start_new_session"] = True
    return children.spawn_tied(cmd, death_signal, unclaimed=lambda p: stop(p, grace=0), **kwargs)


def stop_all(grace: float = GRACE_S) -> None:
    """Stop every server this process started (Ctrl-C, signals, app quit, interpreter exit)."""
    with _LIVE_LOCK:
        procs = list(_LIVE)
    stop_many(procs, grace)


atexit.register(stop_all)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP raise ``Terminated`` in the main thread; servers stop on the way out.

    Outside the main thread (signals cannot be set there) only the final ``stop_all`` applies.
    """
    def handler(signum, _frame):
        raise Terminated(signum)

    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            previous[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        try:
            stop_all()
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)
