"""Cline's own per-request token counts (the CLI's ``metrics``, the VS Code extensions'
``ui_messages.json``) on the turns, and in the session report beside the prediction."""

from __future__ import annotations

import subprocess
import sys

import orjson

from replayer.core.session.formats import cline
from replayer.core.session.turns import load_turns

from cline_home import cli_session, vscode_task
from conftest import REPO


def _metrics(prompt: int, reused: int) -> dict:
    return {"inputTokens": prompt, "outputTokens": 10, "cacheReadTokens": reused, "cacheWriteTokens": 0}


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "replayer.cli", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=300)


def test_the_clis_metrics_are_the_counts_of_the_request_each_response_answered(tmp_path):
    path = cli_session(tmp_path, [_metrics(1002, 14), None, _metrics(1100, 1000)])
    st = load_turns(path)
    got = [(t.recorded.prompt, t.recorded.reused) if t.recorded else None for t in st.turns]
    assert got == [(1002, 14), None, (1100, 1000), None]  # the resume request was never sent
    assert st.turns[2].recorded.output == 10 and "inputTokens" in st.turns[2].recorded.source
    # never part of what is sent
    assert all("recorded" not in m for t in st.turns for m in t.messages)


def test_bad_metrics_are_left_out_not_the_session(tmp_path):
    path = cli_session(tmp_path, [_metrics(10, 20), {"inputTokens": "many"}, _metrics(True, 0)])
    assert [m.recorded for m in cline.load(path).messages if m.role == "assistant"] == [None, None, None]


def test_the_extensions_counts_are_read_by_the_protocol_that_wrote_them(tmp_path):
    # Roo Code and Kilo Code write apiProtocol: OpenAI-style tokensIn holds the cached tokens
    roo = vscode_task(tmp_path / "roo", "t1", [
        {"tokensIn": 900, "tokensOut": 5, "cacheReads": 0, "cacheWrites": 0, "apiProtocol": "openai"},
        {"tokensIn": 960, "tokensOut": 5, "cacheReads": 900, "cacheWrites": 0, "apiProtocol": "openai"}])
    assert [(m.recorded.prompt, m.recorded.reused) for m in cline.load(roo).messages if m.recorded] == \
        [(900, 0), (960, 900)]
    # Anthropic's input_tokens leave the cached ones out: the prompt is all three
    kilo = vscode_task(tmp_path / "kilo", "t1", [
        {"tokensIn": 50, "cacheReads": 0, "cacheWrites": 900, "apiProtocol": "anthropic"},
        {"tokensIn": 20, "cacheReads": 900, "cacheWrites": 30, "apiProtocol": "anthropic"}])
    assert [(m.recorded.prompt, m.recorded.reused) for m in cline.load(kilo).messages if m.recorded] == \
        [(950, 0), (950, 900)]
    # Cline's extension writes no apiProtocol: its task_metadata.json names the provider
    legacy = vscode_task(tmp_path / "cline", "t1", [{"tokensIn": 20, "cacheReads": 900, "cacheWrites": 30}] * 2,
                         provider="anthropic")
    assert [m.recorded.prompt for m in cline.load(legacy).messages if m.recorded] == [950, 950]
    bare = vscode_task(tmp_path / "bare", "t1", [{"tokensIn": 960, "cacheReads": 900}] * 2)
    s = cline.load(bare)
    assert [m.recorded.prompt for m in s.messages if m.recorded] == [960, 960]
    assert all("no apiProtocol or provider recorded" in m.recorded.source for m in s.messages if m.recorded)


def test_a_cancelled_request_without_a_response_is_skipped_and_a_mismatch_matches_nothing(tmp_path):
    ok = {"tokensIn": 900, "cacheReads": 0, "apiProtocol": "openai"}
    path = vscode_task(tmp_path / "a", "t1", [ok, {"cancelReason": "user_cancelled", "tokensIn": 3}, ok])
    assert [m.recorded.prompt for m in cline.load(path).messages if m.recorded] == [900, 900]
    path = vscode_task(tmp_path / "b", "t1", [ok, ok, ok])
    s = cline.load(path)
    assert not any(m.recorded for m in s.messages)
    assert any("records 3 API request(s) for 2 stored response(s)" in w for w in s.warnings)


def test_a_ui_messages_file_over_the_limit_is_not_read_and_says_so(tmp_path):
    import os

    from replayer.core.session.registry import WHOLE_JSON_LIMIT

    ok = {"tokensIn": 900, "cacheReads": 0, "apiProtocol": "openai"}
    path = vscode_task(tmp_path / "a", "t1", [ok, ok])
    os.truncate(path.with_name("ui_messages.json"), WHOLE_JSON_LIMIT + 1)  # sparse: nothing is written
    s = cline.load(path)
    assert not any(m.recorded for m in s.messages) and len(s.messages) >= 2
    assert any("ui_messages.json could not be read" in w and "too large" in w for w in s.warnings)


def test_the_session_report_sets_clines_counts_beside_the_prediction(tmp_path):
    base = cli_session(tmp_path / "first", [None, None, None])
    plain = orjson.loads(_cli("replay", str(base), "--mode", "session", "--json").stdout)
    assert "observed" not in plain  # nothing recorded: the report as before
    a0 = plain["runs"][0]["turns"][0]
    # the first request recorded as the prediction has it, the third not
    path = cli_session(tmp_path / "second", [_metrics(a0["cache_n"] + a0["prompt_n"], a0["cache_n"]), None,
                                             _metrics(5000, 4000)])
    doc = orjson.loads(_cli("replay", str(path), "--mode", "session", "--json").stdout)
    o = doc["observed"]
    assert o["kind"] == "agent" and o["agent"] == "Cline" and (o["n_requests"], o["n_turns"]) == (2, 4)
    assert [(q["turn"], q["cache_n"], q["prompt_n"]) for q in o["requests"]] == \
        [(0, a0["cache_n"], a0["prompt_n"]), (2, 4000, 1000)]
    ag = o["agreement"]["A"]
    assert (ag["compared"], ag["same_cache_n"], ag["same_prompt_tokens"]) == (2, 1, 1)
    assert [d["turn"] for d in ag["differ"]] == [2]
    t2 = doc["runs"][0]["turns"][2]
    assert ag["prompt_n"] == a0["prompt_n"] + t2["prompt_n"] and ag["observed_prompt_n"] == a0["prompt_n"] + 1000
    text = _cli("replay", str(path), "--mode", "session").stdout
    assert "recorded by Cline" in text and "reused as Cline recorded on 1/2 requests" in text
    assert f"turn 2: 4,000 of 5,000 / {t2['cache_n']:,} of {t2['cache_n'] + t2['prompt_n']:,}" in text
    md = _cli("replay", str(path), "--mode", "session", "--markdown").stdout
    head = next(x for x in md.splitlines() if x.startswith("| turn |"))
    assert head.startswith("| turn | Cline reused | Cline processed | A reused |")
    row2 = next(x for x in md.splitlines() if x.startswith("| 2 |"))
    assert row2.startswith(f"| 2 | 4,000 | 1,000 | {t2['cache_n']:,} | {t2['prompt_n']:,} |")
    assert next(x for x in md.splitlines() if x.startswith("| 1 |")).startswith("| 1 | — | — |")
