"""The reproduction bundle against a real llama-server: its script gives the replay's numbers.

A live session replay on real b10001 (tiny llama and lfm2 hybrid models, a tool-calling
conversation whose system prompt changes at request 8) is exported as a bundle; a fresh server
is started with the bundle's own command line (only the binary, model path and port filled in),
and the bundle's stdlib script, run with ``python -I -S``, must report for every request the
``cache_n``, ``prompt_n`` and batch sizes the replay recorded.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import orjson
import pytest

from replayer.core import session_replay as sr
from replayer.core.builds import manager
from replayer.core.engine.live import free_port
from replayer.core.engine.live_session import live_session_events
from replayer.core.repro import write_bundle
from replayer.core.replay import ReplayConfig
from replayer.core.session.request import ChatRequest
from replayer.core.session.turns import turns_of_request

from helpers import agent_conversation
from test_live import tiny  # noqa: F401  (the tiny models fixture)
from test_session_mode import write_log

pytestmark = pytest.mark.live
BUILD = 10001


@pytest.fixture(scope="module")
def binary():
    return Path(manager.install(BUILD, "cpu").binary)


def _serve(cmd: list[str], binary: Path, model: Path) -> tuple[subprocess.Popen, str]:
    """The bundle's command line with this machine's binary, model and a free port."""
    port = free_port()
    cmd = [str(binary)] + cmd[1:]
    cmd[cmd.index("-m") + 1] = str(model)
    cmd[cmd.index("--port") + 1] = str(port)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    proc.kill()
    proc.wait()
    raise AssertionError(f"llama-server did not become healthy: {cmd}")


@pytest.mark.parametrize("arch", ["llama", "lfm2"])
def test_the_bundles_script_reproduces_the_live_replay(binary, tiny, tmp_path, arch):
    msgs, tools = agent_conversation(rounds=6)
    turns = turns_of_request(ChatRequest({"messages": msgs, "tools": tools}))
    log = write_log(tmp_path / "requests.jsonl", turns, change_from=8)
    prep = sr.prepare_session(log, ReplayConfig(a=str(BUILD), b="9859", model=str(tiny[arch]), engine="live"))
    evs = list(live_session_events(prep, "A", tiny[arch], binary=binary))
    live = sr.session_run(prep, "A", evs)
    assert live.failed is None, live.failed
    runs = {"A": live, "B": sr.simulated_session_run(prep, "B")}
    out = write_bundle(tmp_path / "bundle", prep, runs)
    exp = orjson.loads((out / "expected.json").read_bytes())["runs"]["A"]
    assert exp["engine"] == "live" and str(BUILD) in exp["version"]
    proc, url = _serve(exp["command"], binary, tiny[arch])
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        res = subprocess.run([sys.executable, "-I", "-S", str(out / "repro.py"), "--url", url, "--expect", "A",
                              "--json"], capture_output=True, text=True, env=env, timeout=600)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    got = [orjson.loads(line) for line in res.stdout.splitlines()]
    want = exp["requests"]
    assert [(g["cache_n"], g["prompt_n"], g["batches"]) for g in got] == \
        [(w["cache_n"], w["prompt_n"], w["batches"]) for w in want]
    assert res.returncode == 0, res.stderr
    assert f"{len(want)} of {len(want)} requests as in run A" in res.stderr
    # the replay re-processed at the changed system prompt, and the script saw the same
    assert want[8]["cache_n"] < want[7]["n_prompt"]
    _check_log(out, want)


def _check_log(out: Path, want: list[dict]) -> None:
    """``logs/A.log``: the real server's lines under each request's heading — its own
    "prompt eval time … / N tokens" there is the request's prompt_n — and ISSUE.md quotes the
    request that re-processed the most; run B (simulated) has no log."""
    text = (out / "logs" / "A.log").read_text()
    assert not (out / "logs" / "B.log").exists()
    sections: dict[str, str] = {}
    head = None
    for line in text.splitlines():
        if line.startswith("# "):
            head = line.removeprefix("# request ").removeprefix("# server ")
            sections[head] = ""
        else:
            sections[head] += line + "\n"
    assert "n_ctx" in sections["start-up"] or "n_slots" in sections["start-up"]
    for r in want:
        body = sections[str(r["index"])]
        evals = re.findall(r"prompt eval time = +[\d.]+ ms / +(\d+) tokens", body)
        assert evals == [str(r["prompt_n"])], (r["index"], evals)
    issue = (out / "ISSUE.md").read_text()
    worst = max(want[1:], key=lambda r: r["prompt_n"])
    assert f"request {worst['index']} ({worst['prompt_n']:,} tokens processed" in issue
    assert "logs/A.log" in issue
