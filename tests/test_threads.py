"""A session replay of traffic on several threads (main, subagents, side requests): each request
is explained against its own thread's previous request, and with ``--server-args`` the report
says why each thread kept or lost its cache (``server.why``). Non-live: the simulated server."""

from __future__ import annotations

import json

import pytest

from replayer.core import session_replay as sr
from replayer.core.replay import ReplayConfig
from replayer.core.server.traffic import agent_stream


def _stream() -> list[dict]:
    """Six main turns, a title request, two subagent bursts of two, then a compaction of main."""
    bodies = agent_stream(6, burst=2, words=30)
    main = [b for b in bodies if b["thread"] == "main"]
    summary = [main[-1]["messages"][0], {"role": "user", "content": "Summary of the work so far: tests pass."}]
    return bodies + [{"thread": "main", "messages": summary, "max_tokens": 1}]


@pytest.fixture
def log(tmp_path):
    p = tmp_path / "threads.jsonl"
    p.write_text("".join(json.dumps(b) + "\n" for b in _stream()))
    return p


def _run(log, server_args=None):
    prep = sr.prepare_session(log, ReplayConfig(a="9859", b="10001"))
    prep.server_args = server_args
    return prep, sr.simulated_session_run(prep, "A")


def test_misses_are_explained_against_the_same_thread(log):
    bodies = _stream()
    threads = [b["thread"] for b in bodies]
    _, run = _run(log)  # one slot, no host cache: every switch back re-processes
    causes = {t.turn: t.cause["cause"] for t in run.turns if t.cause}
    firsts = [i for i, th in enumerate(threads) if th not in threads[:i]]
    back = [i for i in range(1, len(threads) - 1) if threads[i] == "main" and threads[i - 1] != "main"]
    assert firsts == [0, 2, 4, 8] and back == [3, 6, 10]
    assert not any(i in causes for i in firsts)  # a subagent's first request is no compaction of main
    assert not any(i in causes for i, th in enumerate(threads) if th.startswith("subagent"))
    assert {i: causes[i] for i in back} == {3: "thread_switch", 6: "thread_switch", 10: "thread_switch"}
    assert run.turns[6].cause["detail"].startswith("subagent-1 (2 requests) ran since")
    assert causes[len(bodies) - 1] == "compaction"  # main's own history replaced
    assert set(causes) == set(back) | {len(bodies) - 1}
    # the lost tokens are main's previous prompt minus what the slot still shared
    t = run.turns[6]
    assert t.cause["lost_tokens"] == min(run.turns[3].n_prompt, t.n_prompt - 1) - t.cache_n > 0


def test_the_default_server_keeps_every_thread(log):
    _, run = _run(log, "")  # 4 unified slots and the host cache: nothing but main's compaction lost
    assert [t.turn for t in run.turns if t.cause] == [len(_stream()) - 1]
    _, one = _run(log, "-np 1 --cache-ram 0")
    assert [t.turn for t in one.turns if t.cause and t.cause["cause"] == "thread_switch"] == [3, 6, 10]


def _doc(log, server_args):
    prep = sr.prepare_session(log, ReplayConfig(a="9859", b="10001"))
    prep.server_args = server_args
    runs = (sr.simulated_session_run(prep, "A"), sr.simulated_session_run(prep, "B"))
    doc = sr.report(prep, *runs)
    return doc, {fmt: sr.session_report(doc, runs, fmt).decode() for fmt in sr.SESSION_FORMATS}


def test_why_each_thread_kept_or_lost_its_cache_in_every_output(log):
    doc, out = _doc(log, "-np 1 --cache-ram 0")
    for r in json.loads(out["json"])["runs"]:
        why = {w["request"]: w for w in r["why"]}
        assert sorted(why) == [1, 3, 5, 6, 7, 9, 10, 11]  # every request but each thread's first
        lost = doc["runs"][0]["turns"][3]
        assert (why[3]["slot"], why[3]["kept"], why[3]["cause"], why[3]["fix"]) == (
            0, "", "slot 0 taken by title (lru)", "-np 2")
        assert why[3]["lost_tokens"] == why[3]["shared"] - lost["cache_n"] > 0
        assert (why[5]["kept"], why[5]["lost_tokens"]) == ("slot 0", 0)  # the subagent's second, back to back
        assert why[6]["cause"] == "slot 0 taken by subagent-1 (lru)"
    line = (f"request 3 (main, slot 0): nothing kept; lost {why[3]['lost_tokens']:,} tokens: "
            "slot 0 taken by title (lru) (would keep it: -np 2)")
    assert f"\n  {line}\n" in out["text"] and "\n  thread main: 7 requests, " in out["text"]
    assert f"\n- {line}\n" in out["md"] and "threads:" in out["md"]
    # the default server clears idle slots into the host cache and brings main back from it
    doc, out = _doc(log, "")
    why = {w["request"]: w for w in doc["runs"][0]["why"]}
    assert (why[3]["kept"], why[3]["lost_tokens"], why[10]["kept"], why[10]["lost_tokens"]) == (
        "host cache", 0, "host cache", 0)
    assert f"\n  request 3 (main, slot {why[3]['slot']}): kept in the host cache\n" in out["text"]
    assert "nothing kept" not in out["text"] and "would keep it" not in out["md"]
    # without a server setup the report has no why
    doc, out = _doc(log, None)
    assert "why" not in doc["runs"][0] and "thread main" not in out["text"]


def test_every_turn_says_its_thread_in_the_json_and_the_markdown(log):
    """A consumer of ``--json`` or the Markdown report sees which thread each request was (the
    request stream's own ``thread`` field here): a thread switch reads as one without ``inspect``."""
    threads = [b["thread"] for b in _stream()]
    doc, out = _doc(log, None)
    for r in json.loads(out["json"])["runs"]:
        assert [t["thread"] for t in r["turns"]] == threads
    rows = [line for line in out["md"].splitlines() if line.startswith("| ") and line.split("|")[1].strip().isdigit()]
    assert "| turn | thread | A reused |" in out["md"]
    assert [row.split("|")[2].strip() for row in rows] == threads


def test_a_one_thread_session_has_no_thread_column(tmp_path):
    from conftest import FIXTURES

    prep = sr.prepare_session(FIXTURES / "pi/small-v3.jsonl", ReplayConfig())
    runs = (sr.simulated_session_run(prep, "A"), sr.simulated_session_run(prep, "B"))
    doc = sr.report(prep, *runs)
    assert {t["thread"] for r in doc["runs"] for t in r["turns"]} == {"main"}
    md = sr.session_report(doc, runs, "md").decode()
    assert "| turn | A reused |" in md and "| thread |" not in md
    one = tmp_path / "one.jsonl"
    one.write_text(json.dumps({"messages": [{"role": "user", "content": "Hello there"}]}) + "\n")
    prep = sr.prepare_session(one, ReplayConfig())
    runs = (sr.simulated_session_run(prep, "A"), sr.simulated_session_run(prep, "B"))
    doc = sr.report(prep, *runs)
    assert len(prep.turns.turns) == 1 and doc["verdict"].startswith("over 1 turn "), "one turn, not '1 turns'"
    assert "session replay: 1 turn" in sr.session_report(doc, runs, "text").decode().splitlines()[0]
