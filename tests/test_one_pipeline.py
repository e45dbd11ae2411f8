"""One orchestrator (core/pipeline.Replay) for both modes: the CLI prints its reports, and the
app's export of the same options is the same document, in the resume and the session mode."""

from __future__ import annotations

import pytest

from replayer.cli import _config, build_parser, main
from replayer.core.pipeline import Replay
from replayer.ui.app import ReplayerApp
from replayer.ui.screens.session import SessionSpec

from conftest import FIXTURES
from helpers import wait_for

SESSION = str(FIXTURES / "claude-code/small.jsonl")
OPTS = [[], ["--a", "G1", "--b", "G3", "-ub", "256", "--cms", "256"]]


@pytest.mark.parametrize("mode", ["resume", "session"])
@pytest.mark.parametrize("opts", OPTS, ids=["defaults", "G1-G3"])
def test_the_cli_prints_the_orchestrators_reports(mode, opts, capsys):
    argv = ["replay", SESSION, "--mode", mode, *opts]
    done = Replay(SESSION, _config(build_parser().parse_args(argv)), mode=mode).run()
    for fmt, flag in (("json", ["--json"]), ("md", ["--markdown"]), ("text", [])):
        capsys.readouterr()
        assert main(argv + flag) == (1 if done.failed else 0)
        printed = capsys.readouterr().out.encode()
        assert printed == done.report(fmt).rstrip(b"\n") + b"\n" and len(printed) > 200, fmt


async def _app_export(target, cfg, tmp_path) -> bytes:
    app = ReplayerApp(default_speed=0.0, config=cfg, replay=target, deterministic=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: getattr(app.screen, "comparison", None) is not None, timeout=60)
        app.screen.action_export("json")
        await pilot.pause()
    (f,) = tmp_path.glob("*.json")
    return f.read_bytes()


@pytest.mark.parametrize("mode", ["resume", "session"])
async def test_the_app_exports_the_orchestrators_report(mode, tmp_path, monkeypatch):
    monkeypatch.setenv("REPLAYER_EXPORT_DIR", str(tmp_path))
    cfg = _config(build_parser().parse_args(["replay", SESSION, *OPTS[1]]))
    rp = Replay(SESSION, cfg, mode=mode)
    core = rp.run().report("json")
    target = rp.prepared if mode == "resume" else SessionSpec(FIXTURES / "claude-code/small.jsonl", cfg)
    assert await _app_export(target, cfg, tmp_path) == core


@pytest.mark.parametrize("mode", ["resume", "session"])
async def test_the_app_renders_the_orchestrators_runs_under_its_controls(mode, tmp_path, monkeypatch):
    """The screens sequence nothing: their runs are one ``Replay.stream`` call with the screen's
    controls (pause, speed, cancel), and ``r`` is a second call with new controls."""
    calls = []
    real = Replay.stream

    def spy(self, on_event, controls):
        calls.append((self.mode, controls))
        return real(self, on_event, controls)

    monkeypatch.setattr(Replay, "stream", spy)
    monkeypatch.setenv("REPLAYER_EXPORT_DIR", str(tmp_path))
    cfg = _config(build_parser().parse_args(["replay", SESSION]))
    rp = Replay(SESSION, cfg, mode=mode)
    target = rp.prepare() if mode == "resume" else SessionSpec(FIXTURES / "claude-code/small.jsonl", cfg)
    app = ReplayerApp(default_speed=0.0, config=cfg, replay=target, deterministic=True)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        await wait_for(pilot, lambda: screen.comparison is not None, timeout=60)
        assert [(m, c) for m, c in calls] == [(mode, screen.controls)]
        first = screen.controls
        await pilot.press("r")
        await wait_for(pilot, lambda: screen.comparison is not None and len(calls) == 2, timeout=60)
        assert calls[1][1] is screen.controls is not first and first.cancelled("A") and first.cancelled("B")
