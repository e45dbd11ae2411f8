"""A real build's ``--log-prompts-dir`` folder and its own log, replayed as a session (issue #23).

A server (tiny llama GGUF, the build's ``-lv 4``) is run with ``--log-prompts-dir D`` and
``--log-file L`` (``--log-jsonl`` too where the build has it, 11434 common/arg.cpp:3897); a
scripted client sends a tool-calling conversation as chat requests and keeps each answer's
``timings``. Then, checked against the server and nothing fitted:

- ``replay D --mode session --observed L`` reports per request the ``cache_n``/``prompt_n`` of
  the server's own answers, and its offline layout (the GGUF's tokenizer, the prompt text as
  logged, no template) counts the tokens the server counted;
- D replayed live (each prompt sent to ``/completion`` on a fresh server of the same build)
  reuses what the server reused, request for request.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from replayer.core import session_replay as sr
from replayer.core.builds.manager import list_builds
from replayer.core.engine.live import LiveOptions, LiveServer
from replayer.core.replay import ReplayConfig
from replayer.core.runspec import Knobs
from replayer.core.tiny_models import make_tiny

from conftest import REPO
from helpers import agent_conversation

pytestmark = pytest.mark.live
PREFERRED = (11434, 10001, 9934, 9859)  # the newest first: 11434 creates the folder and has --log-jsonl
CTX = 8192
N = 12


def _build() -> tuple[int, Path]:
    have = {r.build: Path(r.binary) for r in list_builds() if r.backend == "cpu"}
    for b in PREFERRED:
        if b in have:
            return b, have[b]
    pytest.skip(f"none of b{', b'.join(map(str, PREFERRED))} is installed")


def _has_flag(binary: Path, flag: str) -> bool:
    r = subprocess.run([str(binary), "--help"], capture_output=True, text=True, timeout=60)
    return flag in r.stdout + r.stderr


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    build, binary = _build()
    d = tmp_path_factory.mktemp("prompt-log-live")
    model = make_tiny("llama", d / "llama.gguf")
    prompts, log = d / "prompts", d / "server.log"
    prompts.mkdir()  # b9859 only stores the path (common/arg.cpp:3453); 11434 creates it (:3905-3913)
    jsonl = _has_flag(binary, "--log-jsonl")
    extra = ["--log-prompts-dir", str(prompts), "--log-file", str(log)] + (["--log-jsonl"] if jsonl else [])
    msgs, tools = agent_conversation(rounds=N, seed=7, tool_result_words=30)
    cuts = [i for i, m in enumerate(msgs) if m["role"] == "assistant"][:N]
    timings = []
    with LiveServer(LiveOptions(binary=binary, model=model, ctx_size=CTX, extra_args=extra), Knobs(), CTX) as s, \
            httpx.Client(timeout=120) as c:
        s.wait_healthy(c)
        for i in cuts:
            r = c.post(f"{s.url}/v1/chat/completions", json={"messages": msgs[:i], "tools": tools, "max_tokens": 1,
                                                              "temperature": 0})
            assert r.status_code == 200, r.text
            timings.append(r.json()["timings"])
    return {"build": build, "binary": binary, "model": model, "prompts": prompts, "log": log, "jsonl": jsonl,
            "timings": timings}


def test_the_folder_with_its_log_reports_the_servers_own_numbers(served):
    if served["jsonl"]:  # the build wrote its log as JSON lines: the reader takes that shape
        first = served["log"].read_text().splitlines()[0]
        assert json.loads(first)["type"] == "log"
    r = subprocess.run([sys.executable, "-m", "replayer.cli", "replay", str(served["prompts"]), "--mode", "session",
                        "--observed", str(served["log"]), "--a", str(served["build"]), "--b", str(served["build"]),
                        "--model", str(served["model"]), "--json"],
                       cwd=REPO, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    obs, got = doc["observed"], served["timings"]
    assert obs["traced"] and obs["notes"] == []
    assert [(q["cache_n"], q["prompt_n"]) for q in obs["requests"]] == [(t["cache_n"], t["prompt_n"]) for t in got]
    assert [q["n_tokens"] for q in obs["requests"]] == [t["cache_n"] + t["prompt_n"] for t in got]
    assert all(q["slot"] == 0 and q["batches"] >= 1 for q in obs["requests"])
    a = obs["agreement"]["A"]
    # the prompts as logged, tokenized offline with the GGUF's tokenizer: the server's counts
    assert (a["compared"], a["same_prompt_tokens"]) == (N, N)
    # one slot of the server's own build, simulated: it reuses what the server reused
    assert (a["same_cache_n"], a["differ"]) == (N, [])


def test_the_servers_log_beside_the_folder_is_read_without_being_named(served):
    """The fixture's server wrote ``server.log`` next to its ``prompts`` folder, as a user's
    ``--log-prompts-dir D --log-file server.log`` does: ``replay D --mode session`` finds it and
    reports the server's own numbers, exactly as with ``--observed``."""
    assert served["log"].parent == served["prompts"].parent and served["log"].name == "server.log"
    r = subprocess.run([sys.executable, "-m", "replayer.cli", "replay", str(served["prompts"]), "--mode", "session",
                        "--a", str(served["build"]), "--b", str(served["build"]), "--model", str(served["model"]),
                        "--json"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert f"observed side: {served['log']}" in r.stderr
    obs = json.loads(r.stdout)["observed"]
    assert [(q["cache_n"], q["prompt_n"]) for q in obs["requests"]] == \
        [(t["cache_n"], t["prompt_n"]) for t in served["timings"]]


def test_the_folder_replays_live_to_the_servers_cache_n(served):
    cfg = ReplayConfig(a=str(served["build"]), b=str(served["build"]), engine="live", model=str(served["model"]),
                       ctx_size=CTX)
    prep = sr.prepare_session(served["prompts"], cfg, n_ctx=CTX)
    assert len(prep.turns.turns) == N and all(t.wire[0] == "/completion" for t in prep.turns.turns)
    run = sr.session_run(prep, "A", list(sr.session_events(prep, "A")))
    assert not run.failed
    assert [(t.cache_n, t.prompt_n) for t in run.turns] == [(t["cache_n"], t["prompt_n"]) for t in served["timings"]]
