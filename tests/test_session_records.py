"""The session records without the stream (``simulate_session_records``, what ``--json``,
``--markdown`` and the advice read) equal the records read back from the event stream
(``turn_records`` of ``simulate_session``, what the app and ``--jsonl`` show): the same
turns, batches, checkpoints created, erased and restored, checkpoints held, cache reuse,
misses and run summary, on real sample sessions and on the edits that make the slot restore,
re-process everything, refuse a turn or meet a compaction."""

from __future__ import annotations

import pytest

from replayer.core import session_replay as sr
from replayer.core.builds.catalog import parse_build
from replayer.core.engine.slot_turns import simulate_session, simulate_session_records, turn_records
from replayer.core.misses import explain
from replayer.core.engine.schedule import Knobs, Slot
from replayer.core.engine.simulate import RunSpec
from replayer.core.prompt import templates
from replayer.core.prompt.turn_layouts import shared_prefix, turn_layouts
from replayer.core.replay import ReplayConfig
from replayer.core.session.turns import load_turns, turns_of_bodies

from conftest import DATA
from test_session_mode import _turns, edited_tool_result_turns, write_log

SAMPLES = DATA / "samples"
REAL = ["pi/badlogic-pi-mono_v1_large-session.jsonl", "pi/badlogic-pi-mono_v1_before-compaction.jsonl",
        "claude-code/claude-code-viewer_5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl",
        "codex/lazyagents_codex-0.158.0_rollout-2026-09-30T08-39-00-01a0f21c-5c40-7f72-9aa9-ef0b43570680.jsonl"]
BUILDS = ["9859", "10001", "11434"]
MEMORIES = ["plain", "swa", "recurrent"]


def both(turns, build: str, memory: str, n_ctx: int | None = None):
    """(records without the stream, records read from the stream), each with its misses explained."""
    b = parse_build(build)
    lay = turn_layouts(turns, template=templates.bundled("chatml"), build=b)
    spec = RunSpec("A", b, Knobs(memory=memory))
    cost = ReplayConfig().cost()
    direct = simulate_session_records(spec, lay.prompts, cost, n_ctx=n_ctx)
    streamed = turn_records("A", list(simulate_session(spec, lay.prompts, cost, n_ctx=n_ctx)))
    for run in (direct, streamed):
        explain(run, lay.prompts, lay.delimiters)
    return direct, streamed


def same(direct, streamed) -> None:
    assert len(direct.turns) == len(streamed.turns) > 0
    for a, b in zip(direct.turns, streamed.turns):
        assert a == b, f"turn {a.turn} differs"
    assert direct == streamed  # and the run's summary: batches, checkpoints, start and finish


@pytest.mark.parametrize("memory", MEMORIES)
@pytest.mark.parametrize("build", BUILDS)
@pytest.mark.parametrize("rel", REAL, ids=[r.split("/")[0] + "-" + r.split("/")[1][:24] for r in REAL])
def test_records_equal_the_stream_on_real_sessions(rel, build, memory):
    st = load_turns(SAMPLES / rel)
    direct, streamed = both(st.turns, build, memory)
    same(direct, streamed)
    assert direct.n_batches >= len(direct.turns) and direct.finished is not None


@pytest.mark.parametrize("build", BUILDS)
def test_records_equal_the_stream_when_a_checkpoint_is_restored(build):
    direct, streamed = both(edited_tool_result_turns(_turns(8)[0]), build, "recurrent")
    same(direct, streamed)
    assert direct.turns[10].restored is not None and direct.turns[10].cause["cause"] == "client_changed"


@pytest.mark.parametrize("memory", MEMORIES)
def test_records_equal_the_stream_when_the_system_prompt_changes(tmp_path, memory):
    st = load_turns(write_log(tmp_path / "log.jsonl", _turns(11)[0], change_from=20))
    direct, streamed = both(st.turns, "10001", memory)
    same(direct, streamed)
    assert direct.turns[20].cause is not None
    if memory != "plain":  # no checkpoint below the change: everything again, the invalid ones erased
        assert direct.turns[20].full_reprocess and any(e.reason == "invalidated" for e in direct.turns[20].erased)


def test_records_equal_the_stream_with_compaction_and_a_full_context():
    turns, msgs, tools = _turns(6)
    summary = [msgs[0], {"role": "user", "content": "Summary of the conversation so far: fixed three bugs."}]
    bodies = [t.body for t in turns[:8]] + [{"messages": summary, "tools": tools}]
    log_turns = turns_of_bodies(bodies)
    n_ctx = both(log_turns, "9859", "swa")[0].turns[5].n_prompt
    direct, streamed = both(log_turns, "9859", "swa", n_ctx=n_ctx)
    same(direct, streamed)
    assert direct.turns[5].error and direct.turns[5].cause["cause"] == "context_full"
    assert direct.turns[8].cause["cause"] == "compaction"


def test_the_session_api_and_the_cli_read_the_records(tmp_path):
    """``simulated_session_run`` (the CLI's ``--json``) equals ``session_run`` of the events
    (the app's), for both runs of a config whose builds differ."""
    log = write_log(tmp_path / "log.jsonl", _turns(11)[0], change_from=20)
    cfg = ReplayConfig(a="9859", b="10001", model="qwen3.6-35b-a3b-q8_0")
    prep = sr.prepare_session(log, cfg)
    for run in ("A", "B"):
        same(sr.simulated_session_run(prep, run), sr.session_run(prep, run, list(sr.simulated_session_events(prep, run))))


@pytest.mark.parametrize("build", BUILDS)
@pytest.mark.parametrize("case", ["real", "restore"])
def test_records_carry_each_turns_schedule_unchanged(case, build):
    """Each turn's batches (with their reasons), checkpoints created and erased and reuse in the
    records are what a slot given every turn's whole prompt schedules — every user start, not
    only those the session passes as the turn's reach — field for field and in order."""
    turns = (load_turns(SAMPLES / REAL[0]).turns if case == "real"
             else edited_tool_result_turns(_turns(8)[0]))
    b = parse_build(build)
    lay = turn_layouts(turns, template=templates.bundled("chatml"), build=b)
    spec = RunSpec("A", b, Knobs(memory="recurrent"))
    direct = simulate_session_records(spec, lay.prompts, ReplayConfig().cost())
    slot, prev = Slot(b, spec.knobs), None
    erased = 0
    for p, rec in zip(lay.prompts, direct.turns, strict=True):
        sched = slot.run(p.spans, shared_prefix(prev, p).n_tokens if prev is not None else 0)
        assert [(x.start, x.n_tokens, x.n_ubatches, x.reason) for x in rec.batches] == [
            (x.start, x.n_tokens, x.n_ubatches, x.reason) for x in sched.batches], f"turn {p.index}"
        assert [(c.n_tokens, c.pos_min, c.pos_max) for c in rec.created] == [
            (c.n_tokens, c.pos_min, c.pos_max) for _, c in sched.created]
        assert [(e.n_tokens, e.reason) for e in rec.erased] == [(e.checkpoint.n_tokens, e.reason) for e in sched.erased]
        assert rec.cache_n == sched.n_past
        erased += len(sched.erased)
        prev = p
    if case == "real":  # (the short restore case stays under the list's limit on 9859)
        assert erased > 0  # the walk that interleaves erasures with batches ran


def test_facts_read_part_by_part_equal_the_whole_reading(tmp_path):
    """The app's panes read a run's facts as its events come (``SessionFacts``: each repaint
    feeds the turns finished since the last): the same turns, causes and summary as reading
    every event at once, however the events are cut; ``TurnReader`` even mid-turn."""
    import random

    from replayer.core.engine.slot_turns import TurnFinished, TurnReader

    log = write_log(tmp_path / "log.jsonl", _turns(11)[0], change_from=20)
    prep = sr.prepare_session(log, ReplayConfig(a="9859", b="10001", model="qwen3.6-35b-a3b-q8_0"))
    rng = random.Random(5)
    for run in ("A", "B"):
        events = list(sr.simulated_session_events(prep, run))
        whole = sr.session_run(prep, run, events)
        assert any(t.cause for t in whole.turns)  # misses to explain, with the earlier turns they follow
        ends = [i + 1 for i, e in enumerate(events) if type(e) is TurnFinished] + [len(events)]
        cuts = sorted(set(rng.sample(ends, k=len(ends) // 3)) | {len(events)})
        facts, start = sr.SessionFacts(prep, run), 0
        for cut in cuts:
            parted = facts.feed(events[start:cut])
            start = cut
        same(parted, whole)
        reader, start = TurnReader(run), 0
        for cut in sorted(set(rng.sample(range(1, len(events)), k=40)) | {len(events)}):
            read = reader.feed(events[start:cut])
            start = cut
        same(read, turn_records(run, events))
