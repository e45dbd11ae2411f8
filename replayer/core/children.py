"""Child processes that die with replayer, however replayer dies.

A death replayer never sees coming (SIGKILL, the OOM killer, a library user's process ending on
a SIGTERM without ``processes.stop_on_signals``) runs no cleanup, so on Linux each child is
started with ``PR_SET_PDEATHSIG``: the kernel signals it when its parent goes. The kernel
sends that signal when the *thread* that forked the child ends, not the process, and the
threads that ask for children (a run's worker, the thread of the first template render) end
while their children are still in use; so every such child is forked from one long-lived
daemon thread of this module, which only ends with the process.

Here, not in the engine: the template sandbox (``prompt``, which never imports the engine)
starts its render worker the same way as the engine starts ``llama-server``.
"""

from __future__ import annotations

import ctypes
import os
import queue
import signal
import subprocess
import sys
import threading
from concurrent.futures import Future
from typing import Any, Callable

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _find_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _find_prctl()  # resolved here, not in the forked child (which must only make the call)


def _die_with_parent(sig: int) -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the kernel send ``sig`` to the child when its parent dies; None
    where there is no ``prctl``. It only makes the one call (fork-safe in a threaded parent: no
    lock, no import, no allocation of note); a parent that died before the call is caught by the
    ``getppid`` check, since the child was then already reparented."""
    prctl, parent = _PRCTL, os.getpid()
    if prctl is None:
        return None

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


def _kill(proc: subprocess.Popen) -> None:
    proc.kill()
    proc.wait()


class _Spawner:
    """The one long-lived thread children are forked from (see the module docstring)."""

    def __init__(self) -> None:
        self.requests: "queue.SimpleQueue[tuple[list[str], dict[str, Any], Future]]" = queue.SimpleQueue()
        self.thread: threading.Thread | None = None
        self.lock = threading.Lock()

    def popen(self, cmd: list[str], kwargs: dict[str, Any],
              unclaimed: Callable[[subprocess.Popen], None]) -> subprocess.Popen:
        with self.lock:
            if self.thread is None or not self.thread.is_alive():
                self.thread = threading.Thread(target=self._serve, name="replayer-spawner", daemon=True)
                self.thread.start()
        done: Future = Future()
        self.requests.put((cmd, kwargs, done))
        try:
            return done.result()
        except BaseException:  # interrupted while waiting (Ctrl-C): nobody will stop that child
            done.add_done_callback(lambda d: d.exception() is None and unclaimed(d.result()))
            raise

    def _serve(self) -> None:
        while True:
            cmd, kwargs, done = self.requests.get()
            try:
                done.set_result(subprocess.Popen(cmd, **kwargs))
            except BaseException as e:  # handed to the caller, who raises it
                done.set_exception(e)


_SPAWNER = _Spawner()


def spawn_tied(cmd: list[str], death_signal: int = signal.SIGKILL,
               unclaimed: Callable[[subprocess.Popen], None] = _kill, **kwargs: Any) -> subprocess.Popen:
    """``Popen(cmd, **kwargs)`` whose child gets ``death_signal`` from the kernel when this
    process dies (Linux; elsewhere a plain ``Popen``). ``unclaimed`` stops a child whose caller
    was interrupted while it was being started. The signal reaches that one process, not what
    it forks (``core/tree_guard`` passes it on to a tree)."""
    preexec = _die_with_parent(death_signal)
    if preexec is None:
        return subprocess.Popen(cmd, **kwargs)
    return _SPAWNER.popen(cmd, {**kwargs, "preexec_fn": preexec}, unclaimed)
