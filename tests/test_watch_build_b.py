"""The watch screen's build B: ``b`` lists the setup's builds, and choosing one predicts every
request logged so far again on it (the strips and the table start again), then the next ones.

The upstream is the scripted one of the proxy's fault tests (``record_fakes``) and the prompts
are laid out offline (``--tokenizer estimate``): what is checked is the hand-over, against a
predictor of the new build fed the same log lines. The prediction against a real build is
test_watch_live.py's."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from textual.widgets import OptionList

from replayer.core.engine.live import free_port
from replayer.core.prepare import ReplayConfig
from replayer.core.record.predict import Predictor
from replayer.ui.app import ReplayerApp
from replayer.ui.screens.watch import ChooseBuild, WatchScreen, WatchSpec
from replayer.ui.widgets.turn_strip import TurnStrip
from tests.test_record_session import anthropic_turns

from record_fakes import upstream


async def _until(pilot, cond, what: str, timeout: float = 30.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if cond():
            return
        await pilot.pause(0.05)
    raise AssertionError(f"never happened: {what}")


def _filled(strip: TurnStrip) -> int:
    return sum(kind != "pending" for _, kind in strip.cells(max(1, strip.size.width)))


@pytest.mark.asyncio
async def test_choosing_build_b_predicts_every_request_again_on_it(tmp_path):
    log = tmp_path / "watch.jsonl"
    log.write_text('{"an": "older line of another watch"}\n')  # a watch appends: only its own lines count
    cfg = ReplayConfig(b="10001", tokenizer="estimate")
    port = free_port()
    bodies = [{**b, "stream": False} for b in anthropic_turns(4)]
    with upstream() as (url, _script), httpx.Client(timeout=30) as client:
        spec = WatchSpec(url, cfg, f"127.0.0.1:{port}", log, server_args="-np 1 --cache-ram 0")
        app = ReplayerApp(config=cfg, replay=spec)
        async with app.run_test(size=(80, 24)) as pilot:
            await _until(pilot, lambda: isinstance(app.screen, WatchScreen) and app.screen.watch is not None
                         and app.screen.watch.url is not None, "the watch is listening")
            screen = app.screen
            for k, body in enumerate(bodies[:3], 1):
                r = await asyncio.to_thread(client.post, f"http://127.0.0.1:{port}/v1/messages", json=body)
                assert r.status_code == 200
                await _until(pilot, lambda: len(screen.rows) == k, f"row {k}")
            assert screen.watch.build_label == "b10001"
            await pilot.press("b")
            await _until(pilot, lambda: isinstance(app.screen, ChooseBuild), "the build list")
            options = app.screen.query_one(OptionList)
            ids = [options.get_option_at_index(i).id for i in range(options.option_count)]
            assert "9859" in ids and options.highlighted == ids.index("10001")  # the current one
            options.highlighted = ids.index("9859")
            await pilot.press("enter")
            await _until(pilot, lambda: screen.epoch == 1 and len(screen.rows) == 3, "every row again on b9859")
            assert screen.watch.build_label == "b9859" and app.screen is screen
            r = await asyncio.to_thread(client.post, f"http://127.0.0.1:{port}/v1/messages", json=bodies[3])
            await _until(pilot, lambda: len(screen.rows) == 4, "the next request on b9859")
            await pilot.pause()
            strips = [screen.query_one(f"#watch-{s}", TurnStrip) for s in ("observed", "predicted")]
            assert [_filled(s) for s in strips] == [4, 4]  # started again: no row twice
            assert "b9859" in str(screen.query_one("#label-predicted").render())
            lines = [json.loads(x) for x in log.read_text().splitlines()[1:]]
            fresh = Predictor.for_upstream(ReplayConfig(b="9859", tokenizer="estimate"), url,
                                           server_args="-np 1 --cache-ram 0")
            again = [fresh.add(x) for x in lines]
            assert [(r.predicted.cache_n, r.predicted.prompt_n) for r in screen.rows] == \
                [(r.predicted.cache_n, r.predicted.prompt_n) for r in again]
            assert screen.watch.totals.requests == 4
            await pilot.press("b")
            await _until(pilot, lambda: isinstance(app.screen, ChooseBuild), "the build list again")
            await pilot.press("escape")  # no choice: nothing changes
            await pilot.pause()
            assert app.screen is screen and screen.epoch == 1 and screen.watch.build_label == "b9859"
