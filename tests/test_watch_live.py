"""``replayer watch`` on a real build (b9859, tiny llama GGUF): a scripted httpx client sends
chat, Anthropic-Messages and Responses requests (streamed and not) through the watch's proxy,
while the app runs at 80×24 under Pilot.

Checked against the real server, nothing fitted: each request adds one row and one cell to
both turn strips; a row shows what the server said (its own ``cache_n``/``prompt_n``, from the
traffic log the proxy wrote) beside build B's simulation of the same request, and on one
slot of the same build that prediction is the server's reuse, token for token. At 80×24 the
table's lines are whole, the strips and the totals are on screen.
"""

from __future__ import annotations

import asyncio
import json
import queue
import signal
import socket
import subprocess
import sys
import threading

import httpx
import pytest

from replayer.core.engine.live import LiveOptions, LiveServer, free_port
from replayer.core.prepare import ReplayConfig
from replayer.core.runspec import Knobs
from replayer.core.tiny_models import make_tiny
from replayer.ui.app import ReplayerApp
from replayer.ui.screens.watch import WatchScreen, WatchSpec
from replayer.ui.widgets.turn_strip import TurnStrip
from replayer.core.record.watch_text import ROW_WIDTH, row_line

from conftest import REPO
from helpers import EXIT_S, READY_S, agent_conversation, read_line, reaped
from test_record_live import BUILD, _binary, _prefixes, anthropic_body, chat_body, responses_body

pytestmark = pytest.mark.live
CTX = 8192


def _requests() -> list[tuple[str, dict]]:
    """Three agents' conversations (their own system prompts), three requests each."""
    out = []
    for k, (endpoint, make) in enumerate((("/v1/chat/completions", chat_body), ("/v1/messages", anthropic_body),
                                          ("/v1/responses", responses_body))):
        msgs, tools = agent_conversation(rounds=3, seed=k + 1, tool_result_words=20)
        msgs[0]["content"] = f"You are agent {k}. " + msgs[0]["content"]
        out += [(endpoint, make(p, tools, stream=i % 2 == 1)) for i, p in enumerate(_prefixes(msgs, 3))]
    return out


def _filled(strip: TurnStrip) -> int:
    return sum(kind != "pending" for _, kind in strip.cells(max(1, strip.size.width)))


async def _until(pilot, cond, what: str, tries: int = 600) -> None:
    for _ in range(tries):  # a bound on the wait, not a timing assertion
        if cond():
            return
        await pilot.pause(0.05)
    raise AssertionError(f"never happened: {what}")


@pytest.mark.asyncio
async def test_the_strip_grows_per_request_and_shows_observed_vs_predicted(tmp_path):
    model = make_tiny("llama", tmp_path / "llama.gguf")
    log = tmp_path / "watch.jsonl"
    port = free_port()
    cfg = ReplayConfig(b=str(BUILD), model=str(model))  # the GGUF's header: plain attention, as served
    with LiveServer(LiveOptions(binary=_binary(), model=model, ctx_size=CTX), Knobs(), CTX) as server, \
            httpx.Client(timeout=120) as client:
        server.wait_healthy(client)
        # build B's simulated server runs the live server's own command line (one slot, no host cache)
        spec = WatchSpec(server.url, cfg, f"127.0.0.1:{port}", log, server_args=f"-np 1 --cache-ram 0 -c {CTX}")
        app = ReplayerApp(config=cfg, replay=spec)
        async with app.run_test(size=(80, 24)) as pilot:
            await _until(pilot, lambda: isinstance(app.screen, WatchScreen) and app.screen.watch is not None
                         and app.screen.watch.url is not None, "the watch is listening")
            screen = app.screen
            observed, predicted = screen.query_one("#watch-observed", TurnStrip), \
                screen.query_one("#watch-predicted", TurnStrip)
            sent = _requests()
            for k, (endpoint, body) in enumerate(sent, 1):
                r = await asyncio.to_thread(client.post, f"http://127.0.0.1:{port}{endpoint}", json=body)
                assert r.status_code == 200, r.text[:200]
                await _until(pilot, lambda: len(screen.rows) == k, f"row {k}")
                await pilot.pause()
                assert _filled(observed) == k and _filled(predicted) == k  # one more cell on each strip
            rows = screen.rows
            lines = [json.loads(x) for x in log.read_text().splitlines()]
            assert [x["endpoint"] for x in lines] == [e for e, _ in sent]
            # the observed side is the server's own numbers, as logged
            assert [(r.observed.cache_n, r.observed.prompt_n) for r in rows] == \
                [(x["cache_n"], x["prompt_n"]) for x in lines]
            assert all(r.predicted is not None and r.note is None for r in rows)
            # one slot of the same build, laid out by the server: the prediction is the server's reuse
            assert [r.predicted.cache_n for r in rows] == [x["cache_n"] for x in lines]
            assert [r.predicted.n_prompt for r in rows] == [x["cache_n"] + x["prompt_n"] for x in lines]
            assert not any(r.differs for r in rows) and screen.watch.totals.compared == len(sent)
            assert any(x["cache_n"] > 0 for x in lines[1:])  # the runs reused something: not a vacuous match
            # readable at 80×24: whole lines, strips and totals on screen
            table = screen.query_one("#watch-rows")
            assert table.size.width >= ROW_WIDTH and table.size.height >= 5
            assert all(len(row_line(r)) <= ROW_WIDTH for r in rows)
            shown = [str(line.text) if hasattr(line, "text") else "".join(s.text for s in line)
                     for line in table.lines]
            assert shown[-1].rstrip() == row_line(rows[-1]).rstrip()
            for w in (observed, predicted, screen.query_one("#watch-totals")):
                assert w.region.height > 0 and w.region.right <= 80 and w.region.bottom <= 24
            totals = screen.query_one("#watch-totals").render()
            assert all(len(t) <= 80 for t in str(totals).splitlines())
            assert f"{len(sent)} requests" in str(totals)
            # export as in a replay: the rows so far, through core/export.py
            for key, ext in (("e", "md"), ("j", "json")):
                await pilot.press(key)
                await pilot.pause()
            exported = {p.suffix: p for p in app.settings.export_folder().glob("replayer-watch-*")}
            doc = json.loads(exported[".json"].read_text())
            assert [(q["observed"]["cache_n"], q["predicted"]["cache_n"]) for q in doc["requests"]] == \
                [(x["cache_n"], x["cache_n"]) for x in lines]
            assert exported[".md"].read_text().count("\n| ") == len(sent) + 1
        # the app is gone: so is the proxy (nothing listens on its port; its threads ended)
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # the closed connections' TIME_WAIT
            s.bind(("127.0.0.1", port))
        assert not [t for t in threading.enumerate() if t.name.startswith("replayer-watch")]


def test_watch_lines_prints_a_row_a_request_and_stops_clean_on_ctrl_c(tmp_path):
    """``replayer watch --lines`` in front of the real build: one row a request on stdout as it
    passes, the totals on stderr, exit 0 on Ctrl-C, the traffic log complete."""
    model = make_tiny("llama", tmp_path / "llama.gguf")
    log = tmp_path / "watch.jsonl"
    server_log = tmp_path / "server.log"  # the server's own --log-file, followed by --server-log
    port = free_port()
    with LiveServer(LiveOptions(binary=_binary(), model=model, ctx_size=CTX,
                                extra_args=["--log-file", str(server_log)]), Knobs(), CTX) as server, \
            httpx.Client(timeout=120) as client:
        server.wait_healthy(client)
        proc = subprocess.Popen([sys.executable, "-m", "replayer.cli", "watch", "--upstream", server.url, "--listen",
                                 f"127.0.0.1:{port}", "--out", str(log), "--b", str(BUILD), "--model", str(model),
                                 "--server-log", str(server_log), "--lines"],
                                cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        got: queue.Queue[str] = queue.Queue()
        with reaped(proc):
            try:
                assert "logging to" in read_line(proc.stderr)
                assert read_line(proc.stdout).split()[:2] == ["#", "e"]  # the column header
                reader = threading.Thread(target=lambda: [got.put(line) for line in iter(proc.stdout.readline, "")],
                                          daemon=True)
                reader.start()
                sent = _requests()[:4]
                rows = []
                for endpoint, body in sent:
                    assert client.post(f"http://127.0.0.1:{port}{endpoint}", json=body).status_code == 200
                    rows.append(got.get(timeout=READY_S))  # each request's row arrives before the next is sent
            finally:
                proc.send_signal(signal.SIGINT)
                proc.wait(EXIT_S)
                err = proc.stderr.read()
        reader.join(EXIT_S)
        out = "".join(got.queue)
    assert proc.returncode == 0, err
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert len(lines) == len(sent) and not out.strip()
    for k, (row, x) in enumerate(zip(rows, lines)):
        assert row.split()[0] == str(k) and f"{x['cache_n']:,}+{x['prompt_n']:,}" in row  # the server's numbers
        assert row.count(f"{x['cache_n']:,}+{x['prompt_n']:,}") == 2 and "≠" not in row  # …and the prediction
        # b9859's answers name no slot: the server's log does (one slot: 0), beside the predicted one
        assert x.get("id_slot") is None and row.split("│")[0].split()[3] == "0"
    assert f"server: {len(sent)} requests" in err and "Traceback" not in err
    assert f"slot on 0/{len(sent)}" in err  # every row's slot compared (the log's), none differs


def test_the_simulated_server_puts_each_request_on_the_slot_the_real_one_kept_it_on(tmp_path):
    """Two agents interleaved on a real two-slot server (``-np 2 --cache-ram 0``): the server keeps
    each agent on the slot holding its prompt (``get_available_slot``'s similarity), so both keep
    their cache. Build B's simulated server in the same setup (``--server-args``) picks the same
    slots: its reuse is the server's on every request. The same requests predicted on one slot
    (``-np 1``) lose the cache at every switch: the slot choice is what makes the numbers agree.
    And the slot it predicts is the one the server's log says it ran each request on."""
    from replayer.core.record.predict import Predictor
    from replayer.core.record.server_log import read_lines
    from replayer.core.record.watch import Watch
    from replayer.core.server.help import help_for
    from replayer.core.server.setup import parse_server_args

    from test_calibrate_log_live import conversation

    model = make_tiny("llama", tmp_path / "llama.gguf")
    log = tmp_path / "watch.jsonl"
    server_log = tmp_path / "server.log"
    args = f"-np 2 --cache-ram 0 -c {2 * CTX}"
    cfg = ReplayConfig(b=str(BUILD), model=str(model))
    sent = conversation()[:12]

    class LoggingServer(LiveServer):
        """The server writing its own --log-file, what a user gives ``watch --server-log`` (replayer
        owns the flag in a server setup, so it is added to the command here)."""

        def command(self) -> list[str]:
            return [*super().command(), "--log-file", str(server_log)]

    with LoggingServer(LiveOptions(binary=_binary(), model=model), Knobs(), 2 * CTX,
                       setup=parse_server_args(args, help_for(BUILD))) as server, httpx.Client(timeout=120) as client:
        server.wait_healthy(client)
        w = Watch(server.url, cfg, "127.0.0.1:0", log, server_args=args, server_log=server_log)
        url = w.start()
        try:
            rows = []
            for k, body in enumerate(sent, 1):
                assert client.post(f"{url}/v1/chat/completions", json=body).status_code == 200
                for _ in range(1200):  # a bound on the wait for the row, not a timing assertion
                    rows += w.drain()
                    if len(rows) == k:
                        break
                    threading.Event().wait(0.05)
        finally:
            w.stop()
        rows += w.drain()
        one = Predictor.for_upstream(cfg, server.url, server_args="-np 1 --cache-ram 0")
        lines = [json.loads(x) for x in log.read_text().splitlines()]
        on_one_slot = [one.add(x) for x in lines]
    assert len(rows) == len(sent) == len(lines)
    threads = [x["thread"] for x in lines]
    assert len(set(threads)) == 2 and any(a != b for a, b in zip(threads, threads[1:]))  # interleaved
    assert [r.predicted.cache_n for r in rows] == [x["cache_n"] for x in lines]  # the server's reuse, exactly
    assert not any(r.differs for r in rows)
    slot_of = {}
    for r, th in zip(rows, threads):  # each agent stays on one slot, the two on different ones
        assert slot_of.setdefault(th, r.predicted_slot) == r.predicted_slot
    assert len(set(slot_of.values())) == 2
    # the slot the server chose for each request: its -lv 4 log's "processing task" line (b9859's
    # answers carry no id_slot), task by task in the order sent: the predicted slot, every time
    observed = [r.slot for r in read_lines(server.all_lines).requests]
    assert observed == [r.predicted_slot for r in rows]
    # …and the watch, following the server's --log-file (watch --server-log), shows that slot per row
    assert [r.slot for r in rows] == observed and [r.task for r in rows] == [r.task for r in read_lines(
        server.all_lines).requests]
    switched = [k for k in range(1, len(lines)) if threads[k] != threads[k - 1] and lines[k]["cache_n"] > 0]
    assert switched and all(on_one_slot[k].predicted.cache_n < lines[k]["cache_n"] for k in switched)
