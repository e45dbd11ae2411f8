"""The servers this process started, and the guarantee that none outlives it.

Each server starts in a session of its own (``start_new_session``: its pid is the id of its
process group and session), so a stop reaches everything it forked: SIGINT to the group
(llama-server's clean shutdown), SIGKILL to what is left after a short grace period, and a
``/proc`` sweep of the session for a child that moved to a group of its own. ``stop_all``
runs at interpreter exit, and ``stop_on_signals`` turns SIGTERM and SIGHUP into the same
unwinding as Ctrl-C, so an exception, a signal or quitting the app all end with no server left.

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
    for p in mine:
        stop(p, grace=grace)
    return len(mine)


def live_processes() -> list[subprocess.Popen]:
    with _LIVE_LOCK:
        return [p for p in _LIVE if p.poll() is None or members(p.pid)]


def members(sid: int) -> list[int]:
    """Live processes in the process group or session ``sid`` (a server and all it forked)."""
    out = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp session …; comm may hold spaces and parentheses
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 3 and fields[0] != "Z" and sid in (int(fields[2]), int(fields[3])):
            out.append(int(entry.name))
    return out


def _kill_all(sid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(sid, sig)
    for pid in members(sid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def stop(proc: subprocess.Popen, grace: float = GRACE_S) -> None:
    """Stop a server and everything it started; returns when none of them is left (or ~grace+5 s)."""
    if proc.poll() is None:
        _kill_all(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    # the leader may be gone while a child it forked (say, one that ignores SIGINT) lives on
    if proc.poll() is None or members(proc.pid):
        _kill_all(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        deadline = time.monotonic() + 5
        while members(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.02)
    with _LIVE_LOCK:
        _LIVE.discard(proc)
        _OWNER.pop(proc, None)


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
    for p in procs:
        stop(p, grace)


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
