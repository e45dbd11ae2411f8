"""Nothing replayer starts outlives it, even when it gets no chance to clean up (SIGKILL).

``processes.stop_all`` and the signal handlers cover every death replayer sees coming; these
tests kill the replayer process outright, so only the kernel (``PR_SET_PDEATHSIG``) can stop
what it started: a real llama-server (b9859) and a compile's whole process tree.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from conftest import REPO
from replayer.core.builds import manager
from replayer.core.tiny_models import make_tiny

DEADLINE_S = 20.0  # generous: a loaded 2-core machine; the kernel acts at once

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")


def _alive(pid: int) -> bool:
    """Alive and not a zombie (a zombie has already been killed; its parent just has not reaped it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2:].split()[0] != "Z"


def _port_taken(port: int) -> bool:
    """Something listens on the port, or a new server could not bind it (llama-server binds with
    ``SO_REUSEADDR``, as here: the dead server's connections in TIME_WAIT do not count)."""
    with socket.socket() as probe:
        probe.settimeout(2)
        if probe.connect_ex(("127.0.0.1", port)) == 0:
            return True
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen()
        except OSError:
            return True
    return False


def _wait_gone(pids: list[int]) -> list[int]:
    deadline = time.monotonic() + DEADLINE_S
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


def _start_child(code: str) -> tuple[subprocess.Popen, list[str]]:
    """A Python process running ``code``; returns it and the first line it prints (split)."""
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, cwd=REPO)
    line = child.stdout.readline()
    if not line:
        child.wait(timeout=30)
        pytest.fail(f"the child did not start: {child.stderr.read()}")
    return child, line.split()


@pytest.mark.live
def test_a_real_server_dies_with_a_sigkilled_replayer(tmp_path):
    """The server is started from a worker thread that has ended before the kill (the app's runs
    are such threads): it must survive that thread, and die with the process."""
    rec = manager.find_build(9859, "cpu") or manager.install(9859, "cpu")
    model = make_tiny("llama", tmp_path / "llama.gguf")
    code = ("import threading, time, httpx; from pathlib import Path\n"
            "from replayer.core.engine.live import LiveOptions, LiveServer\n"
            "from replayer.core.engine.schedule import Knobs\n"
            f"s = LiveServer(LiveOptions(Path({rec.binary!r}), Path({str(model)!r})), Knobs(), 512)\n"
            "t = threading.Thread(target=lambda: (s.start(), s.wait_healthy(httpx.Client())))\n"
            "t.start(); t.join()\n"
            "print(s.proc.pid, s.port, flush=True)\n"
            "time.sleep(600)\n")
    child, (pid, port) = _start_child(code)
    pid, port = int(pid), int(port)
    try:
        time.sleep(1.0)  # the starting thread is gone; the server must still serve
        assert _alive(pid)
        assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=10).status_code == 200
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        assert _wait_gone([pid]) == [], "llama-server outlived the SIGKILLed replayer"
        deadline = time.monotonic() + DEADLINE_S
        while _port_taken(port) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _port_taken(port), f"port {port} still taken"
    finally:
        child.kill()
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_compile_tree_dies_with_a_sigkilled_replayer(tmp_path):
    """A build step is a tree (cmake → make → compilers); every process of it goes, not only
    the first one. The step here is a shell that forks two long jobs, like make -j2."""
    code = ("import os, time; from pathlib import Path\n"
            "from replayer.core.builds import manager\n"
            "import threading\n"
            f"log = Path({str(tmp_path / 'build.log')!r})\n"
            f"pidfile = Path({str(tmp_path / 'pid')!r})\n"
            "cmd = ['sh', '-c', f'sleep 300 & sleep 300 & echo $$ > {pidfile}.tmp; mv {pidfile}.tmp {pidfile}; wait']\n"
            "threading.Thread(target=manager._run_logged, args=(cmd, Path('.'), dict(os.environ), log, None, 'build'),\n"
            "                 daemon=True).start()\n"
            "while not pidfile.exists(): time.sleep(0.05)\n"
            "print(pidfile.read_text().strip(), flush=True)\n"
            "time.sleep(600)\n")
    child, (shell,) = _start_child(code)
    shell = int(shell)
    tree = [shell]
    deadline = time.monotonic() + DEADLINE_S
    while len(tree) < 3 and time.monotonic() < deadline:  # the shell and its two sleeps
        tree = [shell] + [int(p) for p in os.listdir("/proc") if p.isdigit() and _ppid(int(p)) == shell]
        time.sleep(0.05)
    try:
        assert len(tree) == 3 and all(_alive(p) for p in tree)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        assert _wait_gone(tree) == [], "part of the build step outlived the SIGKILLed replayer"
    finally:
        child.kill()
        for p in tree:
            if _alive(p):
                os.kill(p, signal.SIGKILL)


def _ppid(pid: int) -> int:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return -1
    return int(stat[stat.rfind(")") + 2:].split()[1])
