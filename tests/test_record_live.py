"""``replayer record`` in front of a real build (b9859, tiny llama GGUF): an OpenAI-chat, an
Anthropic-Messages and a Responses client (httpx, streamed and not) run a 40-turn tool-calling
conversation through the proxy. Checked against the real server, nothing fitted:

- the responses are the ones a second server (same binary, model and flags) sends directly,
  byte for byte once the per-request id, clock and timings are set aside;
- the log replays live (``replay --mode session``, engine live) to the logged ``cache_n`` of
  every request, and offline (the GGUF's tokenizer and template, the server's Anthropic and
  Responses conversions) to the prompt tokens the server counted (cache_n + prompt_n);
- the server's own ``--log-prompts-dir`` folder of the same run holds one prompt a request,
  whose GGUF token counts are the server's, and which replayed as ``/completion`` prompts on a
  fresh server gives the same ``cache_n`` per request.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from replayer.core import session_replay as sr
from replayer.core.builds.catalog import parse_build
from replayer.core.builds.manager import list_builds
from replayer.core.engine.live import LiveOptions, LiveServer, free_port
from replayer.core.prompt.turn_layouts import turn_layouts
from replayer.core.replay import ReplayConfig
from replayer.core.runspec import Knobs
from replayer.core.session.turns import load_turns
from replayer.core.tiny_models import make_tiny

from conftest import REPO
from helpers import EXIT_S, agent_conversation, read_line, reaped

pytestmark = pytest.mark.live
BUILD = 9859
CTX = 16384
TURNS = 40  # 14 chat + 13 Anthropic + 13 Responses requests


def _binary() -> Path:
    """The installed build (the live suite's builds are installed by the lead's make target)."""
    for r in list_builds():
        if r.build == BUILD and r.backend == "cpu":
            return Path(r.binary)
    pytest.skip(f"b{BUILD} is not installed")


# -- the three clients' bodies for one conversation ------------------------------------------

def _prefixes(msgs: list[dict], n: int) -> list[list[dict]]:
    """The message lists an agent sent: everything before each assistant reply."""
    cuts = [i for i, m in enumerate(msgs) if m["role"] == "assistant"][:n]
    return [msgs[:i] for i in cuts]


def chat_body(msgs: list[dict], tools: list[dict], stream: bool) -> dict:
    return {"model": "tiny", "messages": msgs, "tools": tools, "max_tokens": 1, "temperature": 0, "stream": stream}


def anthropic_body(msgs: list[dict], tools: list[dict], stream: bool) -> dict:
    out: list[dict] = []
    for m in msgs[1:]:
        if m["role"] == "user":
            out.append({"role": "user", "content": [{"type": "text", "text": m["content"]}]})
        elif m["role"] == "assistant" and m.get("tool_calls"):
            out.append({"role": "assistant", "content": [{"type": "tool_use", "id": c["id"], "name": c["function"]["name"],
                                                          "input": json.loads(c["function"]["arguments"])}
                                                         for c in m["tool_calls"]]})
        elif m["role"] == "assistant":
            out.append({"role": "assistant", "content": [{"type": "text", "text": m["content"]}]})
        else:
            out.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": m["tool_call_id"],
                                                     "content": m["content"]}]})
    return {"model": "tiny", "system": [{"type": "text", "text": msgs[0]["content"]}], "messages": out,
            "tools": [{"name": t["function"]["name"], "description": t["function"]["description"],
                       "input_schema": t["function"]["parameters"]} for t in tools],
            "max_tokens": 1, "temperature": 0, "stream": stream}


def responses_body(msgs: list[dict], tools: list[dict], stream: bool) -> dict:
    items: list[dict] = []
    for m in msgs[1:]:
        if m["role"] == "user":
            items.append({"role": "user", "content": m["content"]})
        elif m["role"] == "assistant" and m.get("tool_calls"):
            items += [{"type": "function_call", "call_id": c["id"], "name": c["function"]["name"],
                       "arguments": c["function"]["arguments"]} for c in m["tool_calls"]]
        elif m["role"] == "assistant":
            items.append({"type": "message", "role": "assistant",
                          "content": [{"type": "output_text", "text": m["content"]}]})
        else:
            items.append({"type": "function_call_output", "call_id": m["tool_call_id"], "output": m["content"]})
    return {"model": "tiny", "instructions": msgs[0]["content"], "input": items,
            "tools": [{"type": "function", **t["function"]} for t in tools], "max_output_tokens": 1,
            "temperature": 0, "stream": stream}


def requests() -> list[tuple[str, dict]]:
    """40 requests: three agents' conversations (their own system prompts) one after another."""
    out = []
    for k, (endpoint, make, n) in enumerate((("/v1/chat/completions", chat_body, 14),
                                             ("/v1/messages", anthropic_body, 13),
                                             ("/v1/responses", responses_body, 13))):
        msgs, tools = agent_conversation(rounds=7, seed=k + 1, tool_result_words=30)
        msgs[0]["content"] = f"You are agent {k}. " + msgs[0]["content"]
        out += [(endpoint, make(p, tools, stream=i % 2 == 1)) for i, p in enumerate(_prefixes(msgs, n))]
    assert len(out) == TURNS
    return out


def _stable(raw: bytes) -> list:
    """A response with what differs between two servers by construction set aside: ids, clocks, timings."""
    def scrub(obj):
        if isinstance(obj, dict):
            return {k: scrub(v) for k, v in obj.items()
                    if k not in ("id", "created", "created_at", "completed_at", "system_fingerprint", "timings", "item_id")}
        if isinstance(obj, list):
            return [scrub(v) for v in obj]
        if isinstance(obj, str) and re.fullmatch(r"(chatcmpl|msg|resp|fc|rs|call)[-_][A-Za-z0-9_-]+", obj):
            return "<id>"
        return obj
    out = []
    for line in raw.split(b"\n"):
        line = line.strip()
        payload = line[5:].strip() if line.startswith(b"data:") else line
        if not payload:
            continue
        try:
            out.append(scrub(json.loads(payload)))
        except ValueError:
            out.append(payload.decode())  # [DONE], event: lines
    return out


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    binary = _binary()
    d = tmp_path_factory.mktemp("record-live")
    model = make_tiny("llama", d / "llama.gguf")
    log = d / "traffic.jsonl"
    port = free_port()
    knobs = Knobs()
    prompts = d / "prompts"
    prompts.mkdir()  # b9859 does not create it (common/arg.cpp:3453; 10865 does)
    behind_opts = LiveOptions(binary=binary, model=model, ctx_size=CTX, extra_args=["--log-prompts-dir", str(prompts)])
    with LiveServer(behind_opts, knobs, CTX) as behind, \
            LiveServer(LiveOptions(binary=binary, model=model, ctx_size=CTX), knobs, CTX) as direct, \
            httpx.Client(timeout=120) as c:
        behind.wait_healthy(c)
        direct.wait_healthy(c)
        proxy = subprocess.Popen([sys.executable, "-m", "replayer.cli", "record", "--upstream", behind.url,
                                  "--listen", f"127.0.0.1:{port}", "--out", str(log)], cwd=REPO,
                                 stderr=subprocess.PIPE, text=True)
        with reaped(proxy):
            try:
                assert "logging to" in read_line(proxy.stderr)
                pairs = []
                for endpoint, body in requests():
                    via = c.post(f"http://127.0.0.1:{port}{endpoint}", json=body)
                    ref = c.post(f"{direct.url}{endpoint}", json=body)
                    pairs.append((endpoint, via, ref))
            finally:
                proxy.terminate()
                proxy.wait(EXIT_S)
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    return {"log": log, "model": model, "pairs": pairs, "lines": lines, "prompts": prompts, "binary": binary}


def test_responses_through_the_proxy_are_the_direct_ones(recorded):
    for endpoint, via, ref in recorded["pairs"]:
        assert via.status_code == ref.status_code, endpoint
        assert via.headers.get("content-type") == ref.headers.get("content-type")
        assert _stable(via.content) == _stable(ref.content), endpoint
    assert sum(via.status_code == 200 for _, via, _ in recorded["pairs"]) >= TURNS // 2


def test_every_request_is_logged_as_sent_with_the_servers_timings(recorded):
    lines = recorded["lines"]
    assert [x["endpoint"] for x in lines] == [e for e, _ in requests()]
    assert [x["body"] for x in lines] == [b for _, b in requests()]
    assert all(x["prompt_n"] > 0 for x in lines)
    assert all(x["timings"] for x in lines[:14])  # chat answers carry timings; the others usage
    assert len({x["thread"] for x in lines}) == 3
    assert all(x["cache_n"] > 0 for x in lines[1:14])  # one slot: each turn extends the last


def test_the_log_replays_offline_to_the_servers_prompt_tokens(recorded):
    st = load_turns(recorded["log"])
    assert len(st.turns) == TURNS
    lay = turn_layouts(st.turns, tokenizer=f"gguf:{recorded['model']}", build=parse_build(BUILD))
    counted = [x["cache_n"] + x["prompt_n"] for x in recorded["lines"]]
    assert [p.n_tokens for p in lay.prompts] == counted


def test_the_log_replays_live_to_the_same_cache_n(recorded, monkeypatch):
    """Each request goes to the endpoint it was recorded on, as recorded: the build converts the
    Anthropic and Responses bodies itself (``engine.live_wire``), chat goes as chat."""
    from replayer.core.engine import live_session

    sent: list[str] = []
    real = live_session.send_wire_turn

    def counted(run, p, *args, **kw):  # the real sender, with a note of where each turn went
        sent.append(p.turn.wire[0])
        return real(run, p, *args, **kw)

    monkeypatch.setattr(live_session, "send_wire_turn", counted)
    cfg = ReplayConfig(a=str(BUILD), b=str(BUILD), engine="live", model=str(recorded["model"]), ctx_size=CTX)
    prep = sr.prepare_session(recorded["log"], cfg, n_ctx=CTX)
    run = sr.session_run(prep, "A", list(sr.session_events(prep, "A")))
    assert not run.failed
    assert sent == [x["endpoint"] for x in recorded["lines"] if x["endpoint"] != "/v1/chat/completions"]
    assert [t.cache_n for t in run.turns] == [x["cache_n"] for x in recorded["lines"]]
    assert [t.prompt_n for t in run.turns] == [x["prompt_n"] for x in recorded["lines"]]
    # the batches of a turn on those endpoints come from the server's log, and tile its prefill
    for t in run.turns:
        assert t.batches and t.batches[0].start == t.cache_n and t.batches[-1].end == t.n_prompt
        assert all(a.end == b.start for a, b in zip(t.batches, t.batches[1:]))


def test_the_servers_prompt_folder_replays_to_its_own_token_counts(recorded):
    from replayer.core.session.formats.prompt_log import read_prompt_log

    log = read_prompt_log(recorded["prompts"])
    lines = recorded["lines"]
    assert len(log.prompts) == TURNS and not log.warnings
    assert log.token_counts(recorded["model"]) == [x["cache_n"] + x["prompt_n"] for x in lines]
    with LiveServer(LiveOptions(binary=recorded["binary"], model=recorded["model"], ctx_size=CTX), Knobs(), CTX) \
            as server, httpx.Client(timeout=120) as c:
        server.wait_healthy(c)
        got = [c.post(f"{server.url}/completion", json={"prompt": p, "n_predict": 1, "temperature": 0,
                                                        "cache_prompt": True}).json()["timings"]
               for p in log.prompts]
    assert [(t["cache_n"], t["prompt_n"]) for t in got] == [(x["cache_n"], x["prompt_n"]) for x in lines]


def test_the_session_report_puts_the_servers_numbers_beside_the_simulation(recorded):
    """``replay LOG --mode session`` (simulated: the GGUF's tokenizer, template and header) reports
    the log's answers as the observed side; on one slot of the recording's own build the
    simulation reuses what the server reused, request for request."""
    r = subprocess.run([sys.executable, "-m", "replayer.cli", "replay", str(recorded["log"]), "--mode", "session",
                        "--a", str(BUILD), "--b", "10001", "--model", str(recorded["model"]), "--json"],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    obs, lines = doc["observed"], recorded["lines"]
    assert [(q["cache_n"], q["prompt_n"]) for q in obs["requests"]] == [(x["cache_n"], x["prompt_n"]) for x in lines]
    assert obs["timed_requests"] == sum(bool(x["timings"]) for x in lines)
    a = obs["agreement"]["A"]
    assert (a["compared"], a["same_cache_n"], a["same_prompt_tokens"], a["differ"]) == (TURNS, TURNS, TURNS, [])
    assert obs["agreement"]["B"]["same_prompt_tokens"] == TURNS  # a plain-attention model: the same prompts
