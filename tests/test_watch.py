"""``replayer watch`` without a server: the prediction of logged records (offline layout), the rows'
width, and bad input at the command line (one line, exit 2, nothing left listening).
The live test (test_watch_live.py) checks the prediction against a real build."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from replayer.core.prepare import ReplayConfig
from replayer.core.record.predict import Predictor, Side, WatchRow
from replayer.core.record.watch_text import ROW_WIDTH, export, row_line, totals_lines
from tests.test_record_session import anthropic_turns

from conftest import REPO


def _rec(seq: int, endpoint: str, body, **kw) -> dict:
    return {"v": 1, "seq": seq, "endpoint": endpoint, "body": body, "status": 200, "thread": "t1",
            "id_slot": 0, "stream": False, "timings": None, "cache_n": None, "prompt_n": None, **kw}


def test_each_record_is_predicted_on_the_slot_the_simulated_server_picks_and_a_difference_is_flagged():
    """Two slots (``-np 2``, no host cache): the simulated server puts each request where build B's
    ``get_available_slot`` would (the least recently used while nothing is similar, then the slot
    holding the thread's last prompt); a request the server answered from another slot, or with
    another reuse, is flagged."""
    p = Predictor.for_upstream(ReplayConfig(b="9859", tokenizer="estimate"), "http://127.0.0.1:9",
                               server_args="-np 2 --cache-ram 0")
    turns = anthropic_turns(3)
    side = {"model": "m", "max_tokens": 5, "system": "Write a five-word title for this conversation.",
            "messages": [{"role": "user", "content": "Summarize in one line what the user asked for today."}]}
    first = p.add(_rec(1, "/v1/messages", turns[0], id_slot=1, cache_n=0, prompt_n=10))
    assert first.predicted_slot == 1 and not first.slot_differs  # both idle and empty: the last in slot order
    assert first.predicted.cache_n == 0 and not first.differs
    title = p.add(_rec(2, "/v1/messages", side, thread="t2", id_slot=0, cache_n=0, prompt_n=10))
    assert title.predicted_slot == 0 and title.predicted.cache_n == 0  # not similar: the least recently used
    grown = p.add(_rec(3, "/v1/messages", turns[1], id_slot=1, cache_n=0, prompt_n=10))  # the server kept nothing
    assert grown.predicted_slot == 1 and grown.predicted.cache_n == first.predicted.n_prompt  # its own slot
    assert grown.differs and not grown.slot_differs  # the server's 0 is flagged, its slot is the predicted one
    moved = p.add(_rec(4, "/v1/messages", turns[2], id_slot=0, cache_n=0, prompt_n=10))
    assert moved.predicted_slot == 1 and moved.slot_differs  # the server took another slot: flagged
    assert row_line(moved).split("│")[1].split()[0] == "1*" and "slot" in export([moved], p.totals, {}, "md").decode()
    assert (p.totals.requests, p.totals.compared, p.totals.differ) == (4, 4, 2)
    assert (p.totals.slots_compared, p.totals.slots_differ) == (4, 1)
    assert "slot on 1/4" in totals_lines(p.totals, "b9859")[1]


def test_an_explicit_id_slot_in_the_body_is_where_the_simulated_server_runs_it():
    p = Predictor.for_upstream(ReplayConfig(b="9859", tokenizer="estimate"), "http://127.0.0.1:9",
                               server_args="-np 3 --cache-ram 0")
    turns = anthropic_turns(2)
    rows = [p.add(_rec(1, "/v1/messages", {**turns[0], "id_slot": 1}, id_slot=1)),
            p.add(_rec(2, "/v1/messages", {**turns[1], "id_slot": 0}, id_slot=0))]
    assert [r.predicted_slot for r in rows] == [1, 0] and not any(r.slot_differs for r in rows)
    assert rows[1].predicted.cache_n == 0  # slot 0 held nothing: the body's slot, not the similar one


def test_without_server_args_the_simulated_server_has_the_upstreams_slots():
    class OneSlotServer:  # what ServerPrompts reads from the upstream's /props
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def total_slots(self):
            return 1

    cfg = ReplayConfig(b="9859", tokenizer="estimate")
    p = Predictor.for_upstream(cfg, "http://127.0.0.1:9")
    p.prompts = OneSlotServer(p.prompts)
    p.add(_rec(1, "/v1/messages", anthropic_turns(1)[0]))
    assert p.setup.n_parallel == 1 and len(p.server().slots) == 1
    assert Predictor.for_upstream(cfg, "http://127.0.0.1:9").setup.n_parallel == 4  # b9859's -np auto


def test_what_cannot_be_predicted_is_a_row_that_says_why():
    p = Predictor.for_upstream(ReplayConfig(tokenizer="estimate"), "http://127.0.0.1:9")
    rows = [p.add(_rec(1, "/completion", {"prompt": "hi"}, cache_n=0, prompt_n=2)),
            p.add(_rec(2, "/v1/messages", None, body_text="{not json", status=400, error="HTTP 400: bad")),
            p.add(_rec(3, "/v1/chat/completions", {"messages": []}, status=502, error="upstream unreachable")),
            p.add(_rec(4, "/v1/responses", {"input": [{"type": "nonsense"}]}, cache_n=0, prompt_n=1)),
            p.add(_rec(5, "/v1/chat/completions", {"messages": "x"}))]
    assert all(r.predicted is None and r.note and r.note.startswith("not simulated") for r in rows)
    assert "Cannot determine type" in rows[3].note  # the server's own conversion error
    assert [r.index for r in rows] == [0, 1, 2, 3, 4] and p.totals.requests == 5
    assert all(len(row_line(r)) <= ROW_WIDTH for r in rows)


def test_rows_and_totals_fit_80_columns_and_export():
    big = Side(12_345_678, 987_654, 123_456.7)
    rows = [WatchRow(99_999, 1, "/v1/messages", "abcdef123456", 63, 200, big, Side(1_234_567, 98_765, 99_999.9)),
            WatchRow(1, 2, "/v1/responses", None, None, 200, Side(), note="not simulated: " + "x" * 200)]
    assert all(len(row_line(r)) <= ROW_WIDTH for r in rows)
    assert "≠" in row_line(rows[0])
    p = Predictor.for_upstream(ReplayConfig(tokenizer="estimate"), "http://127.0.0.1:9")
    for r in rows:
        p.totals.add(r)
    assert all(len(line) <= 80 for line in totals_lines(p.totals, "b10001"))
    meta = {"listen": "http://127.0.0.1:1", "upstream": "http://127.0.0.1:2", "log": "x.jsonl", "build": "b10001"}
    md = export(rows, p.totals, meta, "md").decode()
    assert md.count("\n| ") == 3 and "| yes |" in md
    assert b'"differs": true' in export(rows, p.totals, meta, "json")


def _watch(cwd, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "replayer.cli", "watch", *args, "--lines"], cwd=cwd,
                          capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(REPO)})


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cases = [(["--upstream", "ftp://x"], "http://"),
                 (["--upstream", "http://127.0.0.1:9", "--listen", f"127.0.0.1:{port}"], "cannot listen"),
                 (["--upstream", "http://127.0.0.1:9", "--listen", "nope"], "--listen"),
                 (["--upstream", "http://127.0.0.1:9", "--listen", "127.0.0.1:0", "--b", "nonsense"], "build"),
                 (["--upstream", "http://127.0.0.1:9", "--listen", "127.0.0.1:0", "--server-args=--no-such-flag"],
                  "does not know --no-such-flag")]
        for args, says in cases:
            r = _watch(tmp_path, *args)
            assert r.returncode == 2, (args, r.stderr)
            assert len(r.stderr.strip().splitlines()) == 1 and says in r.stderr, r.stderr
            assert "Traceback" not in r.stderr and not r.stdout
    assert not list(tmp_path.iterdir())  # refused before any log was opened


def test_each_side_says_why_it_re_processed_against_its_own_threads_last_request():
    import copy

    p = Predictor.for_upstream(ReplayConfig(b="9859", tokenizer="estimate"), "http://127.0.0.1:9",
                               server_args="-np 1 --cache-ram 0")
    turns = anthropic_turns(4)
    changed = copy.deepcopy(turns[3])
    changed["system"] = [{"type": "text", "text": "You are a different agent."}]
    side = {"model": "m", "max_tokens": 5, "system": "Write a title.", "messages": [{"role": "user", "content": "t"}]}
    rows = [p.add(_rec(1, "/v1/messages", turns[0], cache_n=0, prompt_n=9)),
            p.add(_rec(2, "/v1/messages", turns[1], cache_n=0, prompt_n=9)),
            p.add(_rec(3, "/v1/messages", side, thread="t2", cache_n=0, prompt_n=9)),
            p.add(_rec(4, "/v1/messages", turns[2], cache_n=0, prompt_n=9)),
            p.add(_rec(5, "/v1/messages", changed, cache_n=0, prompt_n=9))]
    cause = [tuple(c and c["cause"] for c in r.causes) for r in rows]
    assert cause[0] == (None, None) and cause[2] == (None, None)  # a thread's first request is no miss
    assert cause[1] == ("no_usable_checkpoint", None)  # the server kept nothing of an unchanged prefix
    assert cause[3] == ("thread_switch", "thread_switch")  # the side request took the one slot
    assert cause[4] == ("client_changed", "client_changed")
    assert rows[4].causes[0]["where"].startswith("system prompt")
    assert "checkpoint" not in rows[1].causes[0]  # the server's checkpoints are not known
    obs, pred = rows[3].records()
    assert obs.cause["cause"] == pred.cause["cause"] == "thread_switch"  # the strips' letters


def test_an_upstream_that_does_not_say_its_context_sets_no_limit_as_the_session_replay():
    """Without ``/props`` (nothing listens on port 9) the upstream's context is unknown: like the
    session replay without a GGUF, no limit is assumed — a request over 32,768 tokens is predicted, not
    refused as "context full" by a 32k context the user's server may not have."""
    p = Predictor.for_upstream(ReplayConfig(b="9859", tokenizer="estimate"), "http://127.0.0.1:9",
                               server_args="-np 1 --cache-ram 0")
    long = {"model": "m", "max_tokens": 5,
            "messages": [{"role": "user", "content": " ".join(f"word{i}" for i in range(40_000))}]}
    row = p.add(_rec(1, "/v1/chat/completions", long, cache_n=0, prompt_n=10))
    assert row.predicted is not None and row.predicted.n_prompt > 32_768, (row.note, row.predicted)
    assert row.predicted.cache_n == 0 and not row.note
