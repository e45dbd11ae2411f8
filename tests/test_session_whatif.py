"""Client-side what-ifs of a session replay: --keep-reasoning (the history kept as first rendered)."""

from __future__ import annotations

import orjson

from replayer.core.builds.catalog import parse_build
from replayer.core.engine.slot_turns import simulate_session, turn_records
from replayer.core.misses import explain, lost_by_cause
from replayer.core.engine.schedule import Knobs
from replayer.core.engine.simulate import RunSpec
from replayer.core.prompt import templates
from replayer.core.prompt.kept_reasoning import keep_reasoning
from replayer.core.prompt.turn_layouts import turn_layouts
from replayer.core.replay import ReplayConfig

from test_session_mode import DATA, _reasoning_turns, _turns, cli, write_log

THINK = DATA / "chatml-think.jinja"


def _run(lay, build, memory="recurrent"):
    run = turn_records("A", simulate_session(RunSpec("A", build, Knobs(memory=memory)), lay.prompts,
                                             ReplayConfig().cost()))
    explain(run, lay.prompts, lay.delimiters)
    return run


def _reasonings(turns):
    return [m["reasoning_content"] for m in turns[-1].messages if m.get("reasoning_content")]


def test_keep_reasoning_removes_the_dropped_reasoning_misses():
    turns = _reasoning_turns()
    b = parse_build("10001")
    real = turn_layouts(turns, template=templates.from_file(THINK), build=b)
    kept, changed = keep_reasoning(real, b)
    assert changed > 0
    for memory in ("plain", "recurrent"):
        before, after = _run(real, b, memory), _run(kept, b, memory)
        assert lost_by_cause(before)["template_dropped_reasoning"]["tokens"] > 0
        assert not [t for t in after.turns if t.cause] and not lost_by_cause(after)
        # every turn reuses the whole previous prompt, so fewer tokens are re-processed over the session
        for prev, t in zip(after.turns, after.turns[1:]):
            assert t.cache_n == prev.n_prompt and not t.full_reprocess
        assert after.prompt_n < before.prompt_n
        assert sum(t.cache_n for t in after.turns) > sum(t.cache_n for t in before.turns)


def test_kept_prompts_extend_each_other_and_keep_what_was_sent():
    turns = _reasoning_turns()
    b = parse_build("9859")
    real = turn_layouts(turns, template=templates.from_file(THINK), build=b)
    kept, _ = keep_reasoning(real, b)
    gen = "<|im_start|>assistant\n"
    for prev, p in zip(kept.prompts, kept.prompts[1:]):
        assert p.text.startswith(prev.text[:-len(gen)])
    # each reasoning the real prompts ever showed is still in the last what-if prompt, and only those
    shown = {r for r in _reasonings(turns) if any(r in p.text for p in real.prompts)}
    assert shown and all(r in kept.prompts[-1].text for r in shown)
    assert not [r for r in _reasonings(turns) if r not in shown and r in kept.prompts[-1].text]
    assert len(shown) > sum(r in real.prompts[-1].text for r in shown)  # the real resume dropped some


def test_keep_reasoning_changes_nothing_for_a_template_that_keeps_its_history():
    turns, _, _ = _turns(6)
    b = parse_build("10001")
    real = turn_layouts(turns, template=templates.bundled("chatml"), build=b)
    kept, changed = keep_reasoning(real, b)
    assert changed == 0 and [p.text for p in kept.prompts] == [p.text for p in real.prompts]


def test_cli_keep_reasoning(tmp_path):
    log = write_log(tmp_path / "log.jsonl", _reasoning_turns())
    base = ["replay", str(log), "--mode", "session", "--template", str(THINK), "--json"]
    real = orjson.loads(cli(*base).stdout)
    doc = orjson.loads(cli(*base, "--keep-reasoning").stdout)
    assert doc["session"]["what_if"] == ["keep-reasoning"]
    assert any("keep-reasoning:" in n for n in doc["session"]["notes"])
    for r0, r1 in zip(real["runs"], doc["runs"]):
        assert "template_dropped_reasoning" in r0["lost_by_cause"] and not r1["misses"]
        assert r1["prompt_n"] < r0["prompt_n"]
    bad = cli("replay", str(log), "--keep-reasoning")
    assert bad.returncode == 2 and "--mode session" in bad.stderr and "Traceback" not in bad.stderr
    live = cli("replay", str(log), "--mode", "session", "--engine", "live", "--keep-reasoning")
    assert live.returncode == 2 and "simulated only" in live.stderr and "Traceback" not in live.stderr


class _NoSlices(list):
    """A conversation's message list that refuses to be copied by slicing."""

    def __getitem__(self, i):
        if isinstance(i, slice):
            raise AssertionError("a turn's prefix was copied")
        return super().__getitem__(i)


def test_keep_reasoning_reads_a_long_session_in_place():
    """The turns of an imported session share one message list: the what-if walks it in place
    (linear), never copying a turn's prefix (quadratic over a long session)."""
    turns = _reasoning_turns(50)
    b = parse_build("10001")
    real = turn_layouts(turns, template=templates.from_file(THINK), build=b)
    expected, n = keep_reasoning(real, b)
    assert n > 0
    body = turns[0]._body
    assert all(t._body is body for t in turns)
    body["messages"] = _NoSlices(body["messages"])
    kept, changed = keep_reasoning(real, b)
    assert changed == n and [p.text for p in kept.prompts] == [p.text for p in expected.prompts]
