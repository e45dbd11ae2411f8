"""The reproduction bundle without a server: what it holds, what it refuses, and its script's faults.

The script runs with ``python -I -S`` (no site-packages): it must need nothing a maintainer lacks.
Its real check is ``test_repro_live.py``, against a real llama-server build.
"""

from __future__ import annotations

import os
import subprocess
import sys

import orjson
import pytest

from replayer.core import session_replay as sr
from replayer.core.errors import ReplayerError
from replayer.core.repro import write_bundle
from replayer.core.replay import ReplayConfig
from replayer.core.session.request import ChatRequest
from replayer.core.session.turns import turns_of_request

from helpers import agent_conversation
from test_session_mode import write_log

SECRET = "sk-ant-" + "x" * 30


@pytest.fixture
def replayed(tmp_path):
    msgs, tools = agent_conversation(rounds=4)
    msgs[1] = {**msgs[1], "content": f"my key is {SECRET}, keep it safe"}
    turns = turns_of_request(ChatRequest({"messages": msgs, "tools": tools}))
    log = write_log(tmp_path / "requests.jsonl", turns, change_from=6)
    prep = sr.prepare_session(log, ReplayConfig(a="9859", b="10001"))
    runs = {r: sr.simulated_session_run(prep, r) for r in ("A", "B")}
    return prep, runs


def test_the_bundle_holds_every_request_and_each_runs_facts(replayed, tmp_path):
    prep, runs = replayed
    out = write_bundle(tmp_path / "bundle", prep, runs)
    assert sorted(p.name for p in out.iterdir()) == ["ISSUE.md", "README.md", "expected.json", "repro.py",
                                                     "requests.jsonl"]
    reqs = [orjson.loads(line) for line in (out / "requests.jsonl").read_bytes().splitlines()]
    assert [r["index"] for r in reqs] == [t.index for t in prep.turns.turns]
    assert all(r["endpoint"] == "/v1/chat/completions" for r in reqs)
    exp = orjson.loads((out / "expected.json").read_bytes())
    for name, run in runs.items():
        got = exp["runs"][name]["requests"]
        assert [(r["cache_n"], r["prompt_n"], len(r["batches"])) for r in got] == \
            [(t.cache_n, t.prompt_n, len(t.batches)) for t in run.turns]
        cmd = exp["runs"][name]["command"]
        assert cmd[0] == "llama-server" and "--cache-ram" in cmd and cmd[cmd.index("--port") + 1] == "8080"
    # the system prompt changed at request 6: both runs re-process there, and the issue says how much
    assert exp["runs"]["A"]["requests"][6]["prompt_n"] > exp["runs"]["A"]["requests"][5]["prompt_n"]
    issue = (out / "ISSUE.md").read_text()
    for field in ("### Name and Version", "### Operating systems", "### GGML backends", "### Models",
                  "### First Bad Commit", "### Relevant log output"):
        assert field in issue
    assert f"{runs['A'].prompt_n:,} tokens processed" in issue


def test_secrets_are_masked_in_the_bodies_and_counted(replayed, tmp_path):
    prep, runs = replayed
    out = write_bundle(tmp_path / "bundle", prep, runs)
    for name in ("requests.jsonl", "expected.json", "README.md", "ISSUE.md"):
        assert SECRET not in (out / name).read_text()
    assert "[REDACTED]" in (out / "requests.jsonl").read_text()
    n = orjson.loads((out / "expected.json").read_bytes())["redacted_requests"]
    assert n == sum(1 for t in prep.turns.turns if t.n_messages > 1)  # every request from the second message on
    assert f"{n} request(s) had secrets" in (out / "README.md").read_text()


def test_a_folder_that_holds_anything_is_never_touched(replayed, tmp_path):
    prep, runs = replayed
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(ReplayerError, match="not an empty folder"):
        write_bundle(mine, prep, runs)
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".repro-")] == []


def test_the_script_needs_only_the_standard_library_and_reports_a_server_that_is_not_there(replayed, tmp_path):
    prep, runs = replayed
    out = write_bundle(tmp_path / "bundle", prep, runs)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    proc = subprocess.run([sys.executable, "-I", "-S", str(out / "repro.py"), "--url", "http://127.0.0.1:9",
                           "--expect", "A", "--timeout", "5"], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    n = len(prep.turns.turns)
    assert f"0 of {n} requests as in run A" in proc.stderr and f"{n} of {n} requests failed" in proc.stderr
    assert proc.stdout.count("error: URLError") == n


def test_the_cli_writes_the_bundle_of_a_session_replay_and_refuses_it_elsewhere(replayed, tmp_path):
    prep, _ = replayed
    log = str(prep.turns.session.path)
    cli = [sys.executable, "-m", "replayer.cli", "replay", log, "--mode", "session"]
    ok = subprocess.run(cli + ["--repro", str(tmp_path / "b")], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert "reproduction written to" in ok.stderr and (tmp_path / "b" / "repro.py").is_file()
    again = subprocess.run(cli + ["--repro", str(tmp_path / "b")], capture_output=True, text=True, timeout=120)
    assert again.returncode != 0 and "not an empty folder" in again.stderr and "Traceback" not in again.stderr
    resume = subprocess.run(cli[:-2] + ["--repro", str(tmp_path / "c")], capture_output=True, text=True, timeout=120)
    assert resume.returncode != 0 and "--mode session" in resume.stderr and not (tmp_path / "c").exists()
