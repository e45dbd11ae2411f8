"""Run an agent CLI once, headless, in a temporary HOME against the stub model.

The agent gets a HOME of its own (its config written by the registry's ``setup``), the
project folder as working directory and a time limit; its whole process group is killed when
it overruns, so no agent outlives the run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import threading
from pathlib import Path

from replayer.core.agents.registry import Agent
from replayer.core.errors import ReplayerError

#: what a run of one prompt may take (a cold start of the larger CLIs is ~10 s on 2 cores)
TIMEOUT_S = 180.0


def environment(agent: Agent, home: Path, url: str) -> dict[str, str]:
    """A minimal environment: PATH, locale, the temporary HOME and the agent's own settings
    (nothing of the user's keys or proxies)."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TERM", "TZ")}
    env.update({"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
                "XDG_DATA_HOME": str(home / ".local" / "share"), "XDG_CACHE_HOME": str(home / ".cache"),
                "XDG_STATE_HOME": str(home / ".local" / "state"), "NO_COLOR": "1", "CI": "1",
                "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"})
    env.update(agent.setup(home, url))
    return env


def run(agent: Agent, binary: str | Path, args: list[str], *, home: Path, project: Path, url: str,
        timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess:
    env = environment(agent, home, url)
    proc = subprocess.Popen([str(binary), *args], cwd=project, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise ReplayerError(f"{agent.label} did not finish within {timeout:.0f} s") from None
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # helpers the agent left behind
        except ProcessLookupError:
            pass
        reap(home)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def run_commands(agent: Agent, binary: str | Path, args: list[str], commands: list[dict], *, home: Path,
                 project: Path, url: str, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess:
    """Run an agent that reads JSON commands on stdin, one a line: pi's RPC mode answers each
    with a ``response`` line carrying its ``id``; a stream-json ``user`` message (Qwen Code's
    ``--input-format stream-json``, see ``user_message``) is answered by a ``result`` line. Each
    command is sent once the one before it is answered (pi exits at the end of its input, even in
    the middle of a command; Qwen Code given two prompts at once runs the second first), stdin
    closed after the last answer. The return code is 1 when a command failed."""
    env = environment(agent, home, url)
    errors = tempfile.TemporaryFile("w+")  # read at the end: a full pipe would stall the agent
    proc = subprocess.Popen([str(binary), *args], cwd=project, env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=errors, text=True, start_new_session=True)
    timed_out = threading.Event()

    def overrun() -> None:
        timed_out.set()
        os.killpg(proc.pid, signal.SIGKILL)

    timer = threading.Timer(timeout, overrun)
    timer.start()
    try:
        failed = not all(_answered(proc, c.get("id") or f"c{k}", c) for k, c in enumerate(commands))
        proc.stdin.close()
        out = proc.stdout.read()
        proc.wait()
        errors.seek(0)
        err = errors.read()
    except (BrokenPipeError, ValueError):  # it exited before its input ended
        failed, out, err = True, "", ""
        proc.wait()
    finally:
        timer.cancel()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        reap(home)
    if timed_out.is_set():
        raise ReplayerError(f"{agent.label} did not finish within {timeout:.0f} s")
    return subprocess.CompletedProcess(proc.args, proc.returncode or int(failed), out, err)


def user_message(text: str) -> dict:
    """A prompt as a stream-json input line."""
    return {"type": "user", "message": {"role": "user", "content": text}}


def _answered(proc: subprocess.Popen, cid: str, command: dict) -> bool:
    """Send one command and read the agent's output up to its answer: whether it succeeded."""
    user = command.get("type") == "user"
    proc.stdin.write(json.dumps(command if user else {**command, "id": cid}) + "\n")
    proc.stdin.flush()
    for line in proc.stdout:
        try:
            o = json.loads(line)
        except ValueError:
            continue
        if not isinstance(o, dict):
            continue
        if user and o.get("type") == "result":
            return not o.get("is_error")
        if not user and o.get("type") == "response" and o.get("id") == cid:
            return bool(o.get("success"))
    return False


def reap(home: Path) -> int:
    """Kill the daemons an agent started in a session of their own (Cline's hub): every process
    whose environment has this run's temporary HOME, which only this run's processes have."""
    mark = b"\0" + f"HOME={home}".encode() + b"\0"
    killed = 0
    for d in Path("/proc").glob("[0-9]*"):
        try:
            if int(d.name) == os.getpid() or mark not in b"\0" + (d / "environ").read_bytes():
                continue
            os.kill(int(d.name), signal.SIGKILL)
            killed += 1
        except (OSError, ValueError):
            continue
    return killed
