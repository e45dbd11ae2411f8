"""``replayer watch --server-log``: the upstream's own log followed as the observed side of what
its answers do not say (the slot of an answer without ``id_slot``, a full re-processing).

The log lines are llama-server's format strings filled in, as in test_prompt_log.py (``SLT_INF``
"slot %12.*s: id %2d | task %d | ", tools/server/server-common.h); test_watch_live.py follows a
real build's log.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import httpx
import pytest

from replayer.core.errors import ReplayerError
from replayer.core.prepare import ReplayConfig
from replayer.core.record.log_follow import LogFollower, with_task
from replayer.core.record.predict import observed_of
from replayer.core.record.server_log import read_server_log
from replayer.core.record.watch import Watch

from record_fakes import TIMINGS, upstream
from test_prompt_log import LISTEN, _task

REAL = Path(__file__).parent / "data" / "server-log" / "b9859-np2"  # record_server_log.py
CHAT = {"model": "m", "messages": [{"role": "system", "content": "You are a coding agent."},
                                   {"role": "user", "content": "hello"}]}


def _append(path, lines: list[str]) -> None:
    with open(path, "a") as fh:
        fh.write("".join(line + "\n" for line in lines))


def _rec(seq: int, prompt_n: int | None, status: int = 200, endpoint: str = "/v1/chat/completions") -> dict:
    return {"seq": seq, "endpoint": endpoint, "status": status, "id_slot": None, "cache_n": None,
            "prompt_n": prompt_n, "timings": None}


def test_the_follower_hands_each_request_its_task_from_when_the_watch_started(tmp_path):
    log = tmp_path / "server.log"
    _append(log, [LISTEN, *_task(0, 0, 50, 0, 10.0)])  # the server's requests before the watch: not its
    f = LogFollower(log, wait_s=0.2)
    _append(log, [*_task(1, 1, 80, 40, 5.0, t0="0.02"), *_task(2, 0, 90, 0, 6.0, t0="0.03"),
                  *_task(3, 1, 95, 80, 1.0, t0="0.04")])
    assert f.task_for(_rec(1, 40)).task == 1
    assert f.task_for(_rec(2, None, status=400)) is None  # refused before a task: takes none
    assert f.task_for(_rec(3, 15, endpoint="/v1/embeddings")) is None  # not a logged completion
    # task 2 (90 re-processed tokens) is another client's; this request's is task 3 (15)
    third = f.task_for(_rec(4, 15))
    assert (third.task, third.slot, third.cache_n, third.prompt_n) == (3, 1, 80, 15) and f.skipped == 1
    assert f.task_for(_rec(5, 7)) is None  # no task of its size in the log (yet): nothing guessed
    f.close()


def test_another_clients_task_of_the_same_new_token_count_is_told_apart_by_its_reuse(tmp_path):
    """Two clients on one server, each request re-processing 15 tokens: with ``-lv 4`` the log
    says each task's ``cache_n`` too, and the answer's own ``cache_n`` picks its task, not the
    first of the same size (another client's, skipped)."""
    log = tmp_path / "server.log"
    log.write_text(LISTEN + "\n")
    f = LogFollower(log, wait_s=0.2)
    _append(log, [*_task(4, 0, 515, 500, 2.0), *_task(5, 1, 95, 80, 1.0, t0="0.02")])
    rec = {**_rec(1, 15), "cache_n": 80}
    got = f.task_for(rec)
    assert (got.task, got.slot, got.cache_n) == (5, 1, 80) and f.skipped == 1
    _append(log, _task(6, 0, 40, 0, 1.0, t0="0.03"))
    assert f.task_for({**_rec(2, 40), "cache_n": None}).task == 6  # an answer without cache_n: by size alone
    f.close()


def test_a_task_the_server_cancelled_is_no_answers_even_of_the_same_size(tmp_path):
    """A request whose answer failed after its prefill (b9859 answered a tiny model's output with
    a 500: "does not match the expected peg-native format") leaves a task in the log of the same
    size as the next request's; the server's ``cancel task`` line (server-queue.cpp:449) says it
    answered nothing, so it is the failed request's task (its prefill happened) and the next 200
    takes its own; a stream cut short takes only a cancelled task."""
    log = tmp_path / "server.log"
    log.write_text(LISTEN + "\n")
    f = LogFollower(log, wait_s=0.2)
    _append(log, [*_task(16, 0, 58, 35, 1.1), "0.01.043.876 W srv          stop: cancel task, id_task = 16",
                  *_task(22, 0, 58, 35, 1.1, t0="0.02")])
    failed = f.task_for({**_rec(4, None, status=500)})  # its prefill is in the log: the server did process it
    assert (failed.task, failed.cache_n, failed.prompt_n) == (16, 35, 23)
    got = f.task_for({**_rec(5, 23), "cache_n": 35})
    assert got.task == 22 and f.skipped == 0
    assert f.task_for({**_rec(6, 9), "error": "client disconnected before the response ended"}) is None
    f.close()
    assert [r.cancelled for r in read_server_log(log).requests] == [True, False]


def test_a_line_still_being_written_is_read_once_it_is_whole(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(LISTEN + "\n")
    f = LogFollower(log, wait_s=0.2)
    lines = _task(0, 2, 60, 0, 3.0)
    text = "".join(line + "\n" for line in lines)
    cut = text.index("prompt eval time") + 5
    with open(log, "a") as fh:
        fh.write(text[:cut])
    assert f.task_for(_rec(1, 60)) is None  # its timings line is not whole: not matched on half of it
    with open(log, "a") as fh:
        fh.write(text[cut:])
    assert f.task_for(_rec(1, 60)).task == 0
    f.close()


def test_the_log_fills_in_only_what_the_answer_did_not_say(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("")
    f = LogFollower(log, wait_s=0.2)
    _append(log, [*_task(7, 3, 64, 0, 2.0), "0.01.020.000 I slot update_slots: id  3 | task 7 | forcing full "
                  "prompt re-processing due to lack of cache data (likely due to SWA or hybrid/recurrent memory)"])
    rec = _rec(1, 64)
    row = observed_of(0, with_task(rec, f.task_for(rec)))
    assert (row.slot, row.task, row.observed.full_reprocess) == (3, 7, True)
    assert (row.observed.cache_n, row.observed.prompt_n) == (0, 64)  # the answer had none: the log's
    said = {**_rec(2, 64), "id_slot": 1, "cache_n": 5, "prompt_n": 64}
    kept = with_task(said, f.reader.order[0])
    assert (kept["id_slot"], kept["cache_n"]) == (1, 5) and kept["server_log"]["slot"] == 3
    assert "server_log" not in rec  # a copy: the record as logged is not changed
    f.close()


def test_a_missing_server_log_is_one_line_before_the_watch_listens(tmp_path):
    w = Watch("http://127.0.0.1:9", ReplayConfig(b="9859", tokenizer="estimate"), "127.0.0.1:0",
              tmp_path / "w.jsonl", server_log=tmp_path / "nope.log")
    with pytest.raises(ReplayerError, match="is not a file"):
        w.start()
    assert not (tmp_path / "w.jsonl").exists()


def test_the_watch_shows_the_slot_the_servers_log_names_for_an_answer_without_one(tmp_path):
    """Requests through the watch to an upstream whose answers carry no ``id_slot``: each row's
    slot and task are the ones of the log's lines the server wrote for it."""
    log = tmp_path / "server.log"
    _append(log, [LISTEN])
    with upstream() as (url, _):
        w = Watch(url, ReplayConfig(b="9859", tokenizer="estimate"), "127.0.0.1:0", tmp_path / "w.jsonl",
                  server_log=log)
        via = w.start()
        rows = []
        try:
            for k, slot in enumerate((1, 0, 1)):
                # the server logs a task's start and its timings before its answer reaches the client
                _append(log, _task(10 + k, slot, 7 + TIMINGS["prompt_n"], TIMINGS["cache_n"], 1.5))
                r = httpx.post(f"{via}/v1/chat/completions", json={**CHAT, "fault": "no-slot"})
                assert r.status_code == 200 and "id_slot" not in r.json()
                for _ in range(600):  # a bound on the wait for the row, not a timing assertion
                    rows += w.drain()
                    if len(rows) == k + 1:
                        break
                    threading.Event().wait(0.05)
        finally:
            w.stop()
    assert [(r.slot, r.task) for r in rows] == [(1, 10), (0, 11), (1, 12)]
    assert all(r.to_dict()["server_task"] == r.task for r in rows)


def test_a_real_servers_log_gives_each_recorded_request_its_task_and_slot(tmp_path):
    """A real b9859 with two slots, two agents interleaved (tests/data/server-log): its answers
    name no slot; its -lv 4 log, followed from empty, gives every recorded request a task whose
    counts are the answer's own, in order, and the slot: each agent kept on one slot, the two on
    different ones — as the log read whole says."""
    recs = [json.loads(line) for line in (REAL / "traffic.jsonl").read_text().splitlines()]
    log = tmp_path / "server.log"
    log.write_text("")
    f = LogFollower(log, wait_s=0.5)
    log.write_bytes((REAL / "server.log").read_bytes())  # the server's whole run, written after the watch began
    tasks = [f.task_for(r) for r in recs]
    assert len(recs) == 28 and all(r["id_slot"] is None for r in recs) and None not in tasks
    assert [(t.cache_n, t.prompt_n) for t in tasks] == [(r["cache_n"], r["prompt_n"]) for r in recs]
    assert [t.task for t in tasks] == sorted(t.task for t in tasks) and f.skipped == 0
    slot_of: dict[str, int] = {}
    for r, t in zip(recs, tasks):
        assert slot_of.setdefault(r["thread"], t.slot) == t.slot
    assert len(slot_of) == 2 and len(set(slot_of.values())) == 2
    assert [t.slot for t in tasks] == [q.slot for q in read_server_log(REAL / "server.log").requests]
    f.close()


@pytest.mark.asyncio
async def test_l_on_the_watch_screen_follows_the_servers_log_from_then_on(tmp_path):
    """A watch started without ``--server-log``: ``l`` takes the log's path (a wrong one is said
    and changes nothing), the head line names it, and the requests from then on get the slot
    the log names; the one before keeps what its answer said (none)."""
    import asyncio

    from textual.widgets import Input

    from replayer.core.engine.live import free_port
    from replayer.ui.app import ReplayerApp
    from replayer.ui.screens.watch import ServerLogPath, WatchScreen, WatchSpec

    from test_watch_build_b import _until

    log = tmp_path / "server.log"
    _append(log, [LISTEN])
    cfg = ReplayConfig(b="9859", tokenizer="estimate")
    port = free_port()
    with upstream() as (url, _), httpx.Client(timeout=30) as client:
        app = ReplayerApp(config=cfg, replay=WatchSpec(url, cfg, f"127.0.0.1:{port}", tmp_path / "w.jsonl"))
        async with app.run_test(size=(80, 24)) as pilot:
            await _until(pilot, lambda: isinstance(app.screen, WatchScreen) and app.screen.watch is not None
                         and app.screen.watch.url is not None, "the watch is listening")
            screen = app.screen
            head = screen.query_one("#watch-head")
            assert "l: server log" in str(head.render())
            await pilot.pause()
            shown = {k.description for k in app.screen.query("FooterKey") if 0 < k.region.right <= 80}
            # the watch's own keys, on screen at 80 columns (not the strip's: it takes no focus)
            assert {"build B", "server log", "export md", "quit"} <= shown, shown

            async def post(k: int) -> None:
                r = await asyncio.to_thread(client.post, f"http://127.0.0.1:{port}/v1/chat/completions",
                                            json={**CHAT, "fault": "no-slot"})
                assert r.status_code == 200
                await _until(pilot, lambda: len(screen.rows) == k, f"row {k}")

            async def give(path: str) -> None:
                await pilot.press("l")
                await _until(pilot, lambda: isinstance(app.screen, ServerLogPath), "the path field")
                app.screen.query_one(Input).value = path
                await pilot.press("enter")
                await _until(pilot, lambda: app.screen is screen, "back on the watch")

            _append(log, _task(10, 1, 7 + TIMINGS["prompt_n"], TIMINGS["cache_n"], 1.5))
            await post(1)  # not followed yet: its answer says no slot, and nothing else does
            await give(str(tmp_path / "nope.log"))
            assert any("is not a file" in n.message for n in app._notifications)
            assert screen.watch.server_log is None and "l: server log" in str(head.render())
            await give(str(log))
            assert "server log server.log" in str(head.render())
            _append(log, _task(11, 2, 7 + TIMINGS["prompt_n"], TIMINGS["cache_n"], 1.5))
            await post(2)
            assert [(r.slot, r.task) for r in screen.rows] == [(None, None), (2, 11)]
            assert screen.watch.meta()["server_log"] == str(log)
