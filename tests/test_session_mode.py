"""Session mode offline: turns, per-turn prompts derived from one render, the slot cache across
turns and the reasons for each miss (the live counterpart is tests/test_session_live.py)."""

from __future__ import annotations

import subprocess
import sys

import orjson
import pytest

from replayer.core.builds.catalog import parse_build
from replayer.core.engine.slot_turns import simulate_session, turn_records
from replayer.core.misses import explain
from replayer.core.engine.schedule import Knobs
from replayer.core.engine.simulate import RunSpec
from replayer.core.prompt import templates
from replayer.core.prompt.layout import compute_layout
from replayer.core.prompt.turn_layouts import shared_prefix, turn_layouts
from replayer.core.replay import ReplayConfig
from replayer.core.session.request import ChatRequest
from replayer.core.session.turns import count_turns, freeze_system_prompt, response_starts, turns_of_bodies, turns_of_request

from conftest import REPO
from helpers import agent_conversation

DATA = REPO / "tests" / "data"


def cli(*args):
    return subprocess.run([sys.executable, "-m", "replayer.cli", *args], capture_output=True, text=True, cwd=REPO,
                          timeout=300)


def _turns(rounds=6):
    msgs, tools = agent_conversation(rounds=rounds)
    return turns_of_request(ChatRequest({"messages": msgs, "tools": tools})), msgs, tools


def edited_tool_result_turns(turns, at=10):
    """From turn ``at`` on, the client rewrites the newest tool result turn ``at − 1`` had sent."""
    i = len(turns[at - 1].messages) - 1
    assert turns[at - 1].messages[i]["role"] == "tool"
    bodies = []
    for t in turns:
        m = list(t.messages)
        if t.index >= at:
            m[i] = dict(m[i], content=m[i]["content"] + " (truncated by the client)")
        bodies.append({**t.body, "messages": m})
    return turns_of_bodies(bodies)


def write_log(path, turns, change_from=None, new_text="Today is 2026-12-01. "):
    """A request log (one body per line); from turn ``change_from`` on the system prompt carries a date."""
    lines = []
    for t in turns:
        msgs = list(t.messages)
        if change_from is not None and t.index >= change_from:
            msgs[0] = {"role": "system", "content": new_text + msgs[0]["content"]}
        lines.append(orjson.dumps({**t.body, "messages": msgs}))
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def _sim(turns, build="10001", memory="plain", template=None, tokenizer="estimate", n_ctx=None):
    b = parse_build(build)
    lay = turn_layouts(turns, template=template or templates.bundled("chatml"), tokenizer=tokenizer, build=b)
    spec = RunSpec("A", b, Knobs(memory=memory))
    run = turn_records("A", simulate_session(spec, lay.prompts, ReplayConfig().cost(), n_ctx=n_ctx))
    explain(run, lay.prompts, lay.delimiters)
    return run, lay


# -- turns ------------------------------------------------------------------------------

def test_turns_end_before_each_response_and_the_last_is_the_resume():
    turns, msgs, tools = _turns(6)
    starts = response_starts(msgs)
    assert len(turns) == len(starts) + 1 == 6 * 2 + 1
    for t, i in zip(turns, starts):
        assert t.messages == msgs[:i] and msgs[i]["role"] == "assistant" and t.tools == tools
    assert turns[-1].messages == msgs


def test_consecutive_assistant_messages_are_one_response():
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
            {"role": "assistant", "content": "thinking"}, {"role": "assistant", "content": "answer"},
            {"role": "user", "content": "again"}, {"role": "assistant", "content": "ok"}]
    turns = turns_of_request(ChatRequest({"messages": msgs}))
    assert [len(t.messages) for t in turns] == [2, 5, 6]
    assert count_turns(ChatRequest({"messages": msgs})) == 3  # what inspect prints, without the prefixes


def test_request_log_is_detected_and_inspect_counts_turns(tmp_path):
    turns, _, _ = _turns(5)
    log = write_log(tmp_path / "requests.jsonl", turns)
    r = cli("inspect", str(log), "--json")
    assert r.returncode == 0, r.stderr
    info = orjson.loads(r.stdout)
    assert info["format"] == "chat-requests" and info["turns"] == len(turns) == 11
    # a session file: the turns are counted from its messages
    body = tmp_path / "body.json"
    body.write_bytes(orjson.dumps(turns[-1].body))
    assert orjson.loads(cli("inspect", str(body), "--json").stdout)["turns"] == 11


# -- per-turn prompts -------------------------------------------------------------------

@pytest.mark.parametrize("name", ["chatml", "llama3", "qwen3-coder", "gemma"])
def test_derived_turn_prompts_equal_a_real_render_of_every_turn(name):
    turns, _, tools = _turns(8)
    b = parse_build("10001")
    tpl = templates.bundled(name)
    lay = turn_layouts(turns, template=tpl, build=b)
    assert lay.renders <= 6 and not lay.fallbacks  # one render for all turns, plus the checks
    for p in lay.prompts:
        real = templates.render(tpl, p.turn.messages, tools, add_generation_prompt=True)
        assert p.text == real
        ref = compute_layout(p.turn.messages, tools, template=tpl, build=b)
        assert p.n_tokens == ref.n_tokens
        assert p.spans == ref.prompt_spans()


@pytest.mark.parametrize("name", ["chatml", "qwen3-coder"])
def test_a_session_ending_with_the_models_words_is_still_derived_not_rendered_turn_by_turn(name):
    """The resume request of such a session continues the last assistant message (no
    generation prompt): it cannot be the cut base of the earlier turns, and must not make them
    all fall back to one full render each."""
    msgs, tools = agent_conversation(rounds=8)
    msgs = msgs + [{"role": "assistant", "content": "Done: all tests pass."}]
    turns = turns_of_request(ChatRequest({"messages": msgs, "tools": tools}))
    b = parse_build("10001")
    tpl = templates.bundled(name)
    lay = turn_layouts(turns, template=tpl, build=b)
    assert not lay.fallbacks and lay.renders <= 7
    for p in lay.prompts:
        assert p.text == templates.render(tpl, p.turn.messages, tools, add_generation_prompt=True)
        assert p.spans == compute_layout(p.turn.messages, tools, template=tpl, build=b).prompt_spans()


def test_exact_tokenizer_turns_equal_tokenizing_each_turn(tmp_path):
    from replayer.core.prompt import gguf_tokenizer
    from replayer.core.tiny_models import make_tiny

    model = make_tiny("llama", tmp_path / "llama.gguf")
    turns, _, tools = _turns(6)
    b = parse_build("9859")
    lay = turn_layouts(turns, tokenizer=f"gguf:{model}", template=None, build=b)
    assert lay.exact and not lay.fallbacks
    tok = gguf_tokenizer.load(str(model))
    for p in lay.prompts:
        assert p.ids == tok.encode(p.text, add_special=True)
        ref = compute_layout(p.turn.messages, tools, tokenizer=f"gguf:{model}", build=b)
        assert (p.n_tokens, p.spans.user_starts) == (ref.n_tokens, ref.prompt_spans().user_starts)
    for a, c in zip(lay.prompts, lay.prompts[1:]):
        assert shared_prefix(a, c).n_tokens == a.n_tokens  # each turn only appends


def _reasoning_turns(rounds=4):
    msgs = [{"role": "system", "content": "You are an agent."}]
    for i in range(rounds):
        msgs.append({"role": "user", "content": f"task {i}: fix the bug in module {i}"})
        msgs.append({"role": "assistant", "content": f"reading {i}", "reasoning_content": f"I should open file {i} first"})
        msgs.append({"role": "tool", "tool_call_id": str(i), "content": f"contents of file {i}"})
        msgs.append({"role": "assistant", "content": f"fixed {i}", "reasoning_content": f"the fix for {i} is a guard"})
    return turns_of_request(ChatRequest({"messages": msgs}))


def test_a_template_that_drops_reasoning_falls_back_and_the_miss_says_so():
    turns = _reasoning_turns()
    tpl = templates.from_file(DATA / "chatml-think.jinja")
    run, lay = _sim(turns, template=tpl)
    assert lay.fallbacks  # the derivation check caught it
    for p in lay.prompts:
        assert p.text == templates.render(tpl, p.turn.messages, None, add_generation_prompt=True)
    missed = {t.turn: t.cause for t in run.turns if t.cause}
    # a new user message hides the reasoning of the previous task's assistant messages
    assert missed and {c["cause"] for c in missed.values()} == {"template_dropped_reasoning"}
    first = min(missed)
    assert turns[first].messages[-1]["role"] == "user"
    assert "assistant message" in missed[first]["where"] and "<think>" in missed[first]["old_text"]


# -- the cache across turns -------------------------------------------------------------

@pytest.mark.parametrize("memory", ["plain", "swa", "recurrent"])
@pytest.mark.parametrize("build", ["9859", "10001", "11434"])
def test_appending_turns_reuse_the_whole_previous_prompt(build, memory):
    turns, _, _ = _turns(8)
    run, lay = _sim(turns, build=build, memory=memory)
    for prev, t in zip(run.turns, run.turns[1:]):
        assert t.cache_n == prev.n_prompt and t.prompt_n == t.n_prompt - prev.n_prompt
        assert not t.full_reprocess and t.restored is None and not t.cause


def test_checkpoint_churn_differs_between_builds():
    turns, _, _ = _turns(8)
    g1, _ = _sim(turns, build="9859", memory="recurrent")
    g2, _ = _sim(turns, build="10001", memory="recurrent")
    assert all(1 <= len(t.created) <= 2 for t in g1.turns[1:])
    assert all(len(t.created) == 3 for t in g2.turns[1:])
    n = g2.turns[3]
    assert [c.n_tokens for c in n.created] == [g2.turns[2].n_prompt, n.n_prompt - 516, n.n_prompt - 4] or \
        [c.n_tokens for c in n.created][0] == g2.turns[2].n_prompt
    assert any(e.reason == "too_close" for t in g2.turns for e in t.erased)


def test_changed_system_prompt_is_the_cause_of_the_miss(tmp_path):
    turns, _, _ = _turns(11)
    from replayer.core.session.turns import load_turns

    st = load_turns(write_log(tmp_path / "log.jsonl", turns, change_from=20))
    plain, _ = _sim(st.turns, memory="plain")
    hybrid, _ = _sim(st.turns, memory="recurrent")
    for run in (plain, hybrid):
        missed = [t for t in run.turns if t.cause]
        assert [t.turn for t in missed] == [20]
        c = missed[0].cause
        assert c["cause"] == "client_changed" and c["where"].startswith("system prompt")
        assert "Today is 2026-12-01" in c["new_text"] and "Today is" not in c["old_text"]
    # plain KV keeps the common prefix; the hybrid model has no checkpoint below the change
    assert plain.turns[20].cache_n == plain.turns[20].cause["first_diff_token"]
    assert hybrid.turns[20].cache_n == 0 and hybrid.turns[20].full_reprocess
    assert "none at or below the change" in hybrid.turns[20].cause["checkpoint"]
    assert hybrid.turns[20].to_dict()["checkpoint_restore"] == "none_usable"
    assert {t.to_dict()["checkpoint_restore"] for t in hybrid.turns[21:]} == {"not_needed"}


@pytest.mark.parametrize("build", ["9859", "10001", "11434"])
def test_a_late_edit_restores_the_newest_checkpoint_below_it(build):
    turns, _, _ = _turns(8)
    run, _ = _sim(edited_tool_result_turns(turns), build=build, memory="recurrent")
    t = run.turns[10]
    c = t.cause
    assert c["cause"] == "client_changed" and "(truncated by the client)" in c["new_text"]
    assert t.restore == "restored" and t.cache_n == t.restored.n_tokens <= c["first_diff_token"]
    assert c["checkpoint"].startswith(f"restored the checkpoint at {t.restored.n_tokens} tokens")
    assert not t.full_reprocess and [u.turn for u in run.turns if u.cause] == [10]


def test_freeze_system_prompt_removes_the_miss(tmp_path):
    turns, _, _ = _turns(11)
    from replayer.core.session.turns import load_turns

    st = load_turns(write_log(tmp_path / "log.jsonl", turns, change_from=20))
    run, _ = _sim(freeze_system_prompt(st.turns), memory="recurrent")
    assert not [t for t in run.turns if t.cause]


def test_compaction_and_context_full():
    turns, msgs, tools = _turns(6)
    bodies = [t.body for t in turns[:8]]
    summary = [msgs[0], {"role": "user", "content": "Summary of the conversation so far: fixed three bugs."}]
    bodies += [{"messages": summary, "tools": tools}, {"messages": summary + [{"role": "assistant", "content": "ok"},
                                                                             {"role": "user", "content": "next"}],
                                                       "tools": tools}]
    log_turns = turns_of_bodies(bodies)
    run, _ = _sim(log_turns, memory="swa")
    assert run.turns[8].cause["cause"] == "compaction"
    big = _sim(log_turns, n_ctx=run.turns[5].n_prompt)[0]
    assert big.turns[5].cause["cause"] == "context_full" and big.turns[5].error
    assert big.turns[8].cause["cause"] == "compaction"  # compared with the last prompt the slot held


# -- the CLI ----------------------------------------------------------------------------

def test_cli_session_json_markdown_and_bad_combinations(tmp_path):
    turns, _, _ = _turns(11)
    log = write_log(tmp_path / "log.jsonl", turns, change_from=20)
    r = cli("replay", str(log), "--mode", "session", "--model", "qwen3.6-35b-a3b-q8_0", "--json")
    assert r.returncode == 0, r.stderr
    doc = orjson.loads(r.stdout)
    assert doc["mode"] == "session" and doc["session"]["turns"] == 23
    for run in doc["runs"]:
        t20 = run["turns"][20]
        assert {"n_prompt", "cache_n", "prompt_n", "batches", "checkpoints", "checkpoints_restored",
                "checkpoints_erased", "full_reprocess"} <= set(t20)
        assert t20["cause"] == "client_changed" and t20["first_diff_token"] >= 0
        assert run["misses"] == [20] and run["lost_by_cause"]["client_changed"]["tokens"] > 0
    md = cli("replay", str(log), "--mode", "session", "--markdown")
    assert md.returncode == 0 and "turn 20: client_changed" in md.stdout
    check_markdown_report(md.stdout, doc)
    frozen = orjson.loads(cli("replay", str(log), "--mode", "session", "--freeze-system-prompt", "--json").stdout)
    assert frozen["session"]["what_if"] == ["freeze-system-prompt"] and all(not r["misses"] for r in frozen["runs"])
    bad = cli("replay", str(log), "--freeze-system-prompt")
    assert bad.returncode == 2 and "--mode session" in bad.stderr and "Traceback" not in bad.stderr


def check_markdown_report(md: str, doc: dict) -> None:
    """The session Markdown serves as a bug report: the resume export's header block (session,
    engine and settings, builds, status) and one table row per turn with the JSON's numbers."""
    a, b = doc["runs"]
    lines = md.splitlines()
    assert lines[0] == f"## Session replay: {a['build']} vs {b['build']}"
    assert f"**{doc['verdict']}**" in lines
    assert f"- session: `{doc['session']['session']}` ({doc['session']['format']}, 23 turns)" in lines
    engine = next(x for x in lines if x.startswith("- engine: "))
    assert engine.startswith(f"- engine: {a['engine']}; ") and "model = qwen3.6-35b-a3b-q8_0" in engine
    assert f"- builds: A = {a['build']} ({a['generation']}), B = {b['build']} ({b['generation']})" in lines
    assert "- status: A = complete; B = complete" in lines
    head = lines.index("| turn | A reused | A processed | A ms | B reused | B processed | B ms | miss |")
    rows = [x.strip("|").split("|") for x in lines[head + 2:] if x.startswith("| ")]
    assert len(rows) == doc["session"]["turns"]
    for cells, ta, tb in zip(rows, a["turns"], b["turns"]):
        cells = [c.strip() for c in cells]
        assert cells[:3] == [str(ta["turn"]), f"{ta['cache_n']:,}", f"{ta['prompt_n']:,}"]
        assert cells[4:6] == [f"{tb['cache_n']:,}", f"{tb['prompt_n']:,}"]
        want = "; ".join(f"{r}: {t['cause']}" for r, t in (("A", ta), ("B", tb)) if t.get("cause"))
        assert cells[7] == want
    assert rows[20][7].strip() == "A: client_changed; B: client_changed"
