"""``advise --mode session``: changes priced by replaying every turn, client-side switches included."""

from __future__ import annotations

import orjson

from replayer.core.advise import Settings
from replayer.core.advise_session import SessionEvaluator, SessionSettings, advise_session
from replayer.core.replay import ReplayConfig

from test_session_mode import _reasoning_turns, _turns, cli, write_log

HYBRID = "qwen3.6-35b-a3b-q8_0"


def _settings(build="10001", model=HYBRID, **kw):
    return Settings(ReplayConfig(a=build, b=build, model=model, **kw))


def test_a_changing_system_prompt_ranks_freezing_it_first(tmp_path):
    turns, _, _ = _turns(11)
    log = write_log(tmp_path / "log.jsonl", turns, change_from=20)
    adv = advise_session(log, _settings())
    d = adv.to_dict()
    assert d["mode"] == "session"
    first = d["recommendations"][0]
    assert first["side"] == "client" and first["title"] == "keep the system prompt fixed between turns"
    assert first["saving_ms"] > 0 and first["prompt_ms"] < d["today"]["prompt_ms"]
    assert first["command"].startswith("client:") and "--freeze-system-prompt" in first["replayer_command"]
    # the saving is the replay's own: the frozen what-if replayed on its own gives the same time
    ev = SessionEvaluator(log)
    frozen = ev.evaluate(SessionSettings(_settings().config, freeze_system=True))
    assert abs(frozen.prompt_ms - first["prompt_ms"]) < 0.1
    # nothing to gain from keeping reasoning: this session has none
    assert {"keep the reasoning of earlier turns in the prompt"} <= {n["title"] for n in d["no_effect"]}


def test_a_session_without_misses_gets_no_client_advice(tmp_path):
    turns, _, _ = _turns(8)
    log = write_log(tmp_path / "log.jsonl", turns)
    d = advise_session(log, _settings()).to_dict()
    assert not [r for r in d["recommendations"] if r["side"] == "client"]
    client = [n for n in d["no_effect"] if n["side"] == "client"]
    assert len(client) == 2 and all(n["reason"] == "no change in the modelled time" for n in client)
    ram = [n for n in d["no_effect"] if n["kind"] == "cache-ram"]
    assert ram and ram[0]["reason"].startswith("not modelled")


def test_checkpoint_flags_are_priced_across_turns(tmp_path):
    """A hybrid model's edited turn restores a checkpoint, or re-processes everything without
    them: --ctx-checkpoints changes its session. A plain-KV model never uses checkpoints."""
    from test_session_mode import edited_tool_result_turns

    turns, _, _ = _turns(8)
    log = tmp_path / "log.jsonl"
    log.write_bytes(b"\n".join(orjson.dumps(t.body) for t in edited_tool_result_turns(turns)) + b"\n")
    ev = SessionEvaluator(log)
    hybrid = SessionSettings(_settings(model=HYBRID).config)
    with_ck, without = ev.evaluate(hybrid), ev.evaluate(hybrid.with_(ctx_checkpoints=0))
    assert with_ck.checkpoints > 0 and without.checkpoints == 0 and with_ck.prompt_ms != without.prompt_ms
    plain = SessionSettings(_settings(model="llama-8b-q4_0").config)
    a, b = ev.evaluate(plain), ev.evaluate(plain.with_(ctx_checkpoints=0))
    assert a.checkpoints == b.checkpoints == 0 and a.prompt_ms == b.prompt_ms


def test_keep_reasoning_is_advised_for_a_template_that_drops_it(tmp_path):
    from test_session_mode import DATA

    log = write_log(tmp_path / "log.jsonl", _reasoning_turns())
    d = advise_session(log, _settings(template=str(DATA / "chatml-think.jinja"))).to_dict()
    rows = {r["title"]: r for r in d["recommendations"]}
    r = rows["keep the reasoning of earlier turns in the prompt"]
    assert r["side"] == "client" and r["saving_ms"] > 0 and "--keep-reasoning" in r["replayer_command"]


def test_cli_advise_session(tmp_path):
    turns, _, _ = _turns(11)
    log = write_log(tmp_path / "log.jsonl", turns, change_from=20)
    r = cli("advise", str(log), "--mode", "session", "--build", "10001", "--model", HYBRID, "--json")
    assert r.returncode == 0, r.stderr
    doc = orjson.loads(r.stdout)
    assert doc["mode"] == "session" and doc["recommendations"][0]["side"] == "client"
    text = cli("advise", str(log), "--mode", "session", "--build", "10001", "--model", HYBRID)
    assert text.returncode == 0 and "(session mode)" in text.stdout
    assert "1. keep the system prompt fixed between turns" in text.stdout and "client: send the same" in text.stdout
    resume = orjson.loads(cli("advise", str(log), "--build", "10001", "--model", HYBRID, "--json").stdout)
    assert resume["mode"] == "resume" and not [x for x in resume["recommendations"] if x["side"] == "client"]
