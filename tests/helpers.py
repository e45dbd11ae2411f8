"""Test data builders shared by several test modules."""

from __future__ import annotations

import random
import subprocess
import sys
import threading


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


def replay_until(argv: list[str], marker: str, cwd, timeout: float = 120) -> subprocess.Popen:
    """``replayer`` started with ``argv``, returned once its stdout printed a line with ``marker``."""
    p = subprocess.Popen([sys.executable, "-m", "replayer.cli", *argv], cwd=cwd, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    seen = threading.Event()

    def watch():
        for line in p.stdout:
            if marker in line:
                seen.set()

    threading.Thread(target=watch, daemon=True).start()
    if not seen.wait(timeout):
        p.kill()
        raise AssertionError(f"replayer never printed {marker!r}: {p.stderr.read()[-400:]}")
    return p
