"""Test data builders shared by several test modules."""

from __future__ import annotations

import contextlib
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Callable, Iterator

#: Bounds on the waits for a ``replayer`` child on a loaded 2-core CI machine (imports, a server's
#: start-up, a run's first batch; then its exit on a signal). Waits, never timing assertions: a
#: healthy child is done in seconds, and these only decide when a stuck one is declared stuck.
READY_S = 300.0
EXIT_S = 120.0


def agent_conversation(rounds: int = 30, seed: int = 1, tool_result_words: int = 40) -> tuple[list[dict], list[dict]]:
    """A 4·rounds+2-message agent conversation: user → tool call → tool result → answer."""
    rng = random.Random(seed)
    words = "alpha beta gamma delta file path value error batch token server slot cache".split()
    tools = [{"type": "function", "function": {
        "name": name, "description": f"{name} tool",
        "parameters": {"type": "object", "properties": {"arg": {"type": "string"}}, "required": ["arg"]}}}
        for name in ("get_weather", "read_file", "run_command")]
    msgs: list[dict] = [{"role": "system", "content": "You are a helpful agent. " * 20}]
    for i in range(rounds):
        msgs.append({"role": "user", "content": f"Question {i}: " + " ".join(rng.choice(words) for _ in range(25))})
        name = tools[i % 3]["function"]["name"]
        msgs.append({"role": "assistant", "content": None, "tool_calls": [{
            "id": f"call_{i}", "type": "function",
            "function": {"name": name, "arguments": f'{{"arg": "{rng.choice(words)}_{i}"}}'}}]})
        msgs.append({"role": "tool", "tool_call_id": f"call_{i}", "name": name,
                     "content": " ".join(rng.choice(words) for _ in range(tool_result_words))})
        msgs.append({"role": "assistant", "content": "Done: " + " ".join(rng.choice(words) for _ in range(12))})
    msgs.append({"role": "user", "content": "Final question: summarise."})
    return msgs, tools


async def wait_for(pilot, cond, timeout: float = 30.0) -> None:
    """Pause the app until ``cond()`` holds (a bound on the wait, never a timing assertion)."""
    import time

    t = time.monotonic()
    while not cond():
        if time.monotonic() - t > timeout:
            raise AssertionError("timed out")
        await pilot.pause(0.05)


def shown_lines(widget) -> list[str]:
    """The widget's lines as its current region paints them (empty until it is laid out)."""
    return [line.text for line in widget.render_lines(widget.region.reset_offset)]


async def start_from_setup(app, pilot):
    """On the setup screen, Enter (the Replay button has focus) → the replay screen."""
    from replayer.ui.screens.replay import ReplayScreen
    from replayer.ui.screens.setup import SetupScreen

    await wait_for(pilot, lambda: isinstance(app.screen, SetupScreen))
    await pilot.press("enter")
    await wait_for(pilot, lambda: isinstance(app.screen, ReplayScreen))
    return app.screen


def replay_until(argv: list[str], marker: str, cwd, timeout: float = READY_S) -> subprocess.Popen:
    """``replayer`` started with ``argv``, returned once its stdout printed a line with ``marker``.
    Use it as ``with reaped(replay_until(...)) as p:`` so the child and its servers go whatever
    the test's assertions do."""
    p = subprocess.Popen([sys.executable, "-m", "replayer.cli", *argv], cwd=cwd, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    seen = threading.Event()

    def watch():
        for line in p.stdout:
            if marker in line:
                seen.set()

    threading.Thread(target=watch, daemon=True).start()
    if not seen.wait(timeout):
        kill_tree(p)
        raise AssertionError(f"replayer never printed {marker!r} within {timeout:.0f} s: {p.stderr.read()[-400:]}")
    return p


def read_line(stream: IO[str], timeout: float = READY_S) -> str:
    """The next line of a child's pipe, or an ``AssertionError`` after ``timeout`` (a bare
    ``readline`` on a child that never writes would hang the test run)."""
    got: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: got.put(stream.readline()), daemon=True).start()
    try:
        return got.get(timeout=timeout)
    except queue.Empty:
        raise AssertionError(f"the child wrote no line within {timeout:.0f} s") from None


def _children_map() -> dict[int, list[int]]:
    from replayer.core.processes import proc_stats

    kids: dict[int, list[int]] = {}
    for pid, ppid, _, _ in proc_stats():
        kids.setdefault(ppid, []).append(pid)
    return kids


def descendants(pid: int) -> list[int]:
    """Every live process under ``pid`` (the servers a ``replayer`` child started sit in sessions
    of their own, but they are still its children)."""
    kids, out, todo = _children_map(), [], [pid]
    while todo:
        for k in kids.get(todo.pop(), []):
            out.append(k)
            todo.append(k)
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def kill_tree(p: subprocess.Popen, wait: float = 30.0) -> None:
    """SIGKILL a child, everything under it and their process groups; returns once they are gone
    (or after ``wait``). The tree is read before the child dies: afterwards its servers would be
    re-parented and no longer found under it."""
    tree = descendants(p.pid) if p.poll() is None else []
    for pid in [p.pid, *tree]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)  # a server is its own group's leader; anything else: no such group
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        p.wait(timeout=wait)
    deadline = time.monotonic() + wait
    while any(_alive(pid) for pid in tree) and time.monotonic() < deadline:
        time.sleep(0.05)


@contextlib.contextmanager
def reaped(p: subprocess.Popen, strays: Callable[[], list[int]] | None = None) -> Iterator[subprocess.Popen]:
    """The child, killed with its whole tree on the way out if it is still there: an assertion
    failing mid-test (or a child that ignores its SIGINT) leaves no orphan server or proxy.
    ``strays`` finds the test's servers by a tag of its own, for those a child that already
    exited left behind (then no longer under it)."""
    try:
        yield p
    finally:
        if p.poll() is None or descendants(p.pid):
            kill_tree(p)
        for pid in strays() if strays else []:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
