"""A traffic log is a session: the server's Anthropic and Responses conversions, the importer, the replay."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings

from replayer.core.errors import ImportFailed
from replayer.core.session import load_session
from replayer.core.session.server_conversions import (ConversionError, anthropic_to_chat, normalize_billing_header,
                                                      responses_to_chat)
from replayer.core.session.turns import load_turns
from tests.record_fakes import proxy_to, upstream
from tests.fuzzing import mutated_sessions

_FUZZ_DIR = Path(tempfile.mkdtemp(prefix="replayer-fuzz-traffic-"))

TOOLS_A = [{"name": "read", "description": "Read a file", "input_schema": {"type": "object", "properties": {
    "path": {"type": "string"}}}}]


def anthropic_turns(n: int) -> list[dict]:
    """An Anthropic Messages conversation growing by one tool round trip a request."""
    msgs: list[dict] = [{"role": "user", "content": [{"type": "text", "text": "fix the bug"}]}]
    out = []
    for i in range(n):
        out.append({"model": "m", "max_tokens": 64, "system": [{"type": "text", "text": "You are an agent."}],
                    "tools": TOOLS_A, "messages": [dict(m) for m in msgs]})
        msgs.append({"role": "assistant", "content": [{"type": "thinking", "thinking": "hm"},
                                                      {"type": "tool_use", "id": f"c{i}", "name": "read",
                                                       "input": {"path": f"f{i}.py", "lines": [1, 2]}}]})
        msgs.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"c{i}",
                                                  "content": [{"type": "text", "text": f"contents {i}"}]}]})
    return out


def test_anthropic_conversion_is_the_servers():
    body = {"system": [{"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1; cch=a5145;You are"},
                       {"type": "text", "text": " Claude."}, {"type": "image"}],
            "messages": [{"role": "user", "content": "hi"},
                         {"role": "assistant"},
                         {"role": "assistant", "content": [{"type": "text", "text": "ok"},
                                                           {"type": "tool_use", "id": "t1", "name": "read",
                                                            "input": {"z": 1, "a": "é"}}]},
                         {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [
                             {"type": "text", "text": "a"}, {"type": "image", "source": {"type": "url", "url": "u"}},
                             {"type": "text", "text": "b"}]}, {"type": "text", "text": "go on"}]}],
            "tool_choice": {"type": "any"}, "stop_sequences": ["X"], "temperature": 0.2, "stream": True,
            "thinking": {"type": "enabled"}, "metadata": {"user_id": "u_session_1"}}
    new = anthropic_to_chat(body, 10001)
    assert new["messages"] == [
        {"role": "system", "content": "x-anthropic-billing-header: cc_version=2.1; cch=fffff;You are Claude."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "text", "text": "ok"}], "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "read", "arguments": '{"z":1,"a":"é"}'}}]},
        {"role": "user", "content": [{"type": "text", "text": "go on"}]},
        {"role": "tool", "tool_call_id": "t1", "content": [{"type": "text", "text": "a"}, {
            "type": "image_url", "image_url": {"url": "u"}}, {"type": "text", "text": "b"}]}]
    assert (new["tool_choice"], new["stop"], new["max_tokens"], new["temperature"], new["stream"]) == \
        ("required", ["X"], 4096, 0.2, True)
    assert new["thinking_budget_tokens"] == 10000 and new["__metadata_user_id"] == "u_session_1"
    old = anthropic_to_chat(body, 9940)  # before 9981 a tool result's images were dropped, its text joined
    assert old["messages"][4] == {"role": "tool", "tool_call_id": "t1", "content": "ab"}
    assert normalize_billing_header("x-anthropic-billing-header: cch=abc;") == "x-anthropic-billing-header: cch=abc;"
    with pytest.raises(ConversionError):
        anthropic_to_chat({"system": "s"})


def test_responses_conversion_is_the_servers():
    body = {"instructions": "be brief", "model": "m", "max_output_tokens": 9, "reasoning": {"effort": "low"},
            "tools": [{"type": "function", "name": "sh", "parameters": {}}, {"type": "web_search"}],
            "input": [{"role": "user", "content": "hi"},
                      {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "think"}]},
                      {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
                      {"type": "function_call", "call_id": "c1", "name": "sh", "arguments": "{}"},
                      {"type": "function_call_output", "call_id": "c1", "output": "done"}]}
    new = responses_to_chat(body, 10865)
    assert new["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"text": "hi", "type": "text"}]},
        {"role": "assistant", "content": [{"text": "ok", "type": "text"}], "reasoning_content": "think",
         "tool_calls": [{"function": {"arguments": "{}", "name": "sh"}, "id": "c1", "type": "function"}]},
        {"content": "done", "role": "tool", "tool_call_id": "c1"}]
    assert new["tools"] == [{"type": "function", "function": {"name": "sh", "parameters": {}, "strict": True}}]
    assert new["max_tokens"] == 9 and "max_output_tokens" not in new and new["reasoning_effort"] == "low"
    assert "reasoning_effort" not in responses_to_chat(body, 10001) and "reasoning" in responses_to_chat(body, 10001)
    assert responses_to_chat({"input": "x"})["messages"] == [{"role": "user", "content": "x"}]
    for bad in ({"input": 3}, {"input": [{"type": "nope"}]}, {"input": "x", "previous_response_id": "r"}):
        with pytest.raises(ConversionError):
            responses_to_chat(bad)


def _record(tmp_path, requests: list[tuple[str, dict]]) -> object:
    log = tmp_path / "traffic.jsonl"
    with upstream() as (url, _), proxy_to(url, log) as p:
        for endpoint, body in requests:
            httpx.post(f"{p.url}{endpoint}", json=body)
        p.wait_lines(len(requests))
    return log


def test_a_recorded_log_imports_as_the_converted_requests_in_order(tmp_path):
    turns = anthropic_turns(6)
    reqs = [("/v1/messages", b) for b in turns]
    reqs.insert(3, ("/v1/chat/completions", {"messages": [{"role": "system", "content": "Write a title."},
                                                          {"role": "user", "content": "fix the bug"}]}))
    reqs.append(("/completion", {"prompt": "raw"}))
    log = _record(tmp_path, reqs)
    st = load_turns(log)
    assert st.session.format == "traffic-log" and st.exact
    want = [anthropic_to_chat(b) for b in turns]
    want.insert(3, reqs[3][1])
    assert [t.body["messages"] for t in st.turns] == [w["messages"] for w in want]
    assert st.turns[1].tools == want[1]["tools"]
    assert any("/completion" in w for w in st.session.warnings)
    assert any("2 threads" in w for w in st.session.warnings)


def test_a_traffic_log_replays_as_a_session(tmp_path):
    log = _record(tmp_path, [("/v1/messages", b) for b in anthropic_turns(5)])
    r = subprocess.run([sys.executable, "-m", "replayer.cli", "replay", str(log), "--mode", "session", "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    doc = orjson.loads(r.stdout)
    assert doc["session"]["format"] == "traffic-log" and doc["session"]["turns"] == 5
    for run in doc["runs"]:  # each request extends the last: the cache holds all but the new messages
        assert all(t["cache_n"] > 0 for t in run["turns"][1:]) and not run["misses"]
    # the log's answers are the observed side: the scripted server always says cache_n 7, prompt_n 5
    obs = doc["observed"]
    assert (obs["n_requests"], obs["cache_n"], obs["prompt_n"], obs["timed_requests"]) == (5, 35, 25, 5)
    assert [q["cache_n"] for q in obs["requests"]] == [7] * 5
    for run, ag in zip(doc["runs"], obs["agreement"].values()):
        want = [t["turn"] for t in run["turns"] if t["cache_n"] != 7]
        assert ag["compared"] == 5 and [d["turn"] for d in ag["differ"]] == want and want
        assert ag["same_cache_n"] == 5 - len(want)
    text = subprocess.run([sys.executable, "-m", "replayer.cli", "replay", str(log), "--mode", "session"],
                          capture_output=True, text=True, timeout=120).stdout
    assert "observed (the server, as recorded): reused 35, processed 25 tokens" in text
    assert f"cache_n as the server's on {5 - len(want)}/5 requests" in text
    md = subprocess.run([sys.executable, "-m", "replayer.cli", "replay", str(log), "--mode", "session", "--markdown"],
                        capture_output=True, text=True, timeout=120).stdout
    assert "**Observed vs simulated**" in md and f"| {5 - len(want)}/5 |" in md
    assert "of prompt time on the 5 timed requests (server 0.01 s)" in text


def test_a_session_that_is_not_a_traffic_log_has_no_observed_side():
    from conftest import FIXTURES

    path = next(p for p in sorted(FIXTURES.rglob("*.jsonl")) if load_session(p).format != "traffic-log")
    r = subprocess.run([sys.executable, "-m", "replayer.cli", "replay", str(path), "--mode", "session", "--json"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "observed" not in orjson.loads(r.stdout)


def test_a_log_with_nothing_replayable_is_a_one_line_error(tmp_path):
    log = tmp_path / "traffic.jsonl"
    line = {"v": 1, "seq": 1, "endpoint": "/v1/messages", "body": {"messages": []}, "body_sha256": "x",
            "status": 502, "timings": None, "error": "upstream 127.0.0.1:1 unreachable: Connection refused"}
    log.write_text(json.dumps(line) + "\n" + json.dumps({**line, "seq": 2}) + "\n")
    with pytest.raises(ImportFailed, match="no replayable requests.*no server answered"):
        load_session(log)


def test_a_tool_call_without_a_content_key_is_rendered():
    """The server's Responses conversion makes ``{"role": "assistant", "tool_calls": [...]}`` with no
    content key; the server renders its tool call (seen on b9859), so the offline render must too."""
    from replayer.core.builds.catalog import parse_build
    from replayer.core.prompt.turn_layouts import turn_layouts
    from replayer.core.session.turns import Turn

    call = {"id": "c1", "type": "function", "function": {"name": "sh", "arguments": '{"a": 1}'}}
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"}]
    with_null = [msgs[0], {**msgs[1], "content": None}, msgs[2]]
    lay = turn_layouts([Turn(0, {"messages": msgs}), Turn(1, {"messages": with_null})], build=parse_build(9859))
    assert '"sh"' in lay.prompts[0].text and lay.prompts[0].text == lay.prompts[1].text


def test_a_prompt_log_folder_is_read_in_the_servers_order(tmp_path):
    from replayer.core.session.formats.prompt_log import is_prompt_log, read_prompt_log

    d = tmp_path / "prompts"
    d.mkdir()
    for ms, text in ((20, "second"), (3, "first"), (1000, "third")):
        (d / f"{ms:012d}.txt").write_text(text)
    (d / "notes.md").write_text("mine")
    assert is_prompt_log(d) and not is_prompt_log(tmp_path)
    log = read_prompt_log(d)
    assert log.prompts == ["first", "second", "third"]
    assert log.warnings == ["skipped 1 entries not named as llama-server names its prompts"]
    with pytest.raises(ImportFailed, match="no prompt files"):
        read_prompt_log(tmp_path / "empty" if (tmp_path / "empty").mkdir() is None else None)


def _log_lines() -> bytes:
    """A traffic log as the proxy writes it (``Exchange.record``), for chat, Anthropic and Responses."""
    from replayer.core.record.traffic_log import Exchange

    bodies = [("/v1/messages", b) for b in anthropic_turns(3)]
    bodies += [("/v1/chat/completions", {"messages": [{"role": "system", "content": "Write a title."},
                                                      {"role": "user", "content": "fix the bug"}]}),
               ("/v1/responses", {"instructions": "be brief", "input": [{"role": "user", "content": "hi"}]})]
    out = []
    for seq, (endpoint, body) in enumerate(bodies, 1):
        ex = Exchange(seq, "POST", endpoint, {"content-type": "application/json"}, orjson.dumps(body))
        ex.response.start(200, "application/json")
        ex.response.timings = {"cache_n": 3 * seq, "prompt_n": 5, "prompt_ms": 1.5}
        ex.response.usage = {"cache_read_input_tokens": 3 * seq, "input_tokens": 5}
        out.append(orjson.dumps(ex.record()))
    return b"\n".join(out) + b"\n"


_FUZZ_LOG = _log_lines()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_sessions([("record/traffic.jsonl", _FUZZ_LOG)]))
def test_a_mutated_traffic_log_imports_replays_and_is_watched_or_is_one_error(sample):
    """Untrusted lines: detection, import, the turns and the watch's predictor either take a
    mutated log or refuse it with one ``ReplayerError`` (a row's note, for the watch)."""
    from fuzzing import check_detection, check_loading
    from replayer.core.errors import ReplayerError
    from replayer.core.prepare import ReplayConfig
    from replayer.core.record.predict import Predictor
    from replayer.core.record.watch_text import ROW_WIDTH, export, row_line

    _, data = sample
    f = _FUZZ_DIR / "traffic.jsonl"
    f.write_bytes(data)
    fmt = check_detection(f)
    if fmt == "traffic-log":
        check_loading(f, fmt)
        try:
            load_turns(f)
        except ReplayerError:
            pass
    p = Predictor.for_upstream(ReplayConfig(tokenizer="estimate"), "http://127.0.0.1:9")
    for line in data.splitlines():
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(rec, dict):
            row = p.add(rec)
            assert row.predicted is not None or row.note
            assert len(row_line(row)) <= ROW_WIDTH
    for fmt in ("md", "json", "text"):
        export(p.rows, p.totals, {}, fmt)


def test_the_fuzzed_log_is_a_traffic_log_watched_in_full():
    f = _FUZZ_DIR / "whole.jsonl"
    f.write_bytes(_FUZZ_LOG)
    assert load_session(f).format == "traffic-log" and len(load_turns(f).turns) == 5


async def test_the_apps_session_report_of_a_traffic_log_shows_the_server_beside_the_runs(tmp_path):
    """The app reads the core's report: the same observed lines under the verdict, and in its export."""
    from textual.widgets import Static

    from helpers import wait_for
    from replayer.core.replay import ReplayConfig
    from replayer.ui.app import ReplayerApp
    from replayer.ui.screens.session import SessionScreen, SessionSpec

    log = _record(tmp_path, [("/v1/messages", b) for b in anthropic_turns(4)])
    cfg = ReplayConfig()
    app = ReplayerApp(default_speed=0.0, config=cfg, replay=SessionSpec(log, cfg), deterministic=True)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, SessionScreen) and app.screen.comparison is not None)
        screen = app.screen
        text = str(screen.query_one("#session-report", Static).render())
        assert "observed (the server, as recorded): reused 28, processed 20 tokens" in text
        assert "cache_n as the server's on" in text
        md = screen.export_bytes("md").decode()
        assert "**Observed vs simulated**" in md
        assert orjson.loads(screen.export_bytes("json"))["observed"]["n_requests"] == 4
