"""The option table (core/options.py): the CLI's arguments and the setup screen's fields are
rendered from it, so their defaults, types and ranges cannot differ."""

from __future__ import annotations

import dataclasses

import pytest
from textual.widgets import Input, Select, Static

from replayer.cli import _config, build_parser
from replayer.core import options
from replayer.core.hardware import presets
from replayer.core.replay import ReplayConfig
from replayer.ui.app import ReplayerApp
from replayer.ui.screens.setup import TEXT_FIELDS, SetupScreen

from conftest import FIXTURES
from helpers import wait_for

SESSION = str(FIXTURES / "pi/small-v3.jsonl")
#: config fields no front end sets (the app's image policy, a test's memory override)
NOT_OPTIONS = {"images", "memory"}


def test_every_config_field_is_declared_once():
    fields = options.config_fields()
    declared = [o.field for o in options.OPTIONS if o.field]
    assert len(declared) == len(set(declared)), "an option declared twice"
    assert set(declared) <= fields, "an option names no ReplayConfig field"
    assert fields - set(declared) - set(options.SESSION_FILE_FIELDS) == NOT_OPTIONS


@pytest.mark.parametrize("argv", [["replay", SESSION], ["bisect", SESSION, "--good", "10001", "--bad", "9859"],
                                  ["advise", SESSION]])
def test_the_clis_defaults_are_the_configs(argv):
    cfg = _config(build_parser().parse_args(argv))
    assert cfg == ReplayConfig(), [f.name for f in dataclasses.fields(cfg)
                                   if getattr(cfg, f.name) != getattr(ReplayConfig(), f.name)]


def test_the_clis_options_reach_the_config():
    ns = build_parser().parse_args(["replay", SESSION, "--a", "G1", "-b", "512", "-ub", "256", "--cms", "64",
                                    "--ctx-checkpoints", "3", "--engine", "live", "--timeout", "9",
                                    "--holdout", "x.jsonl", "--repeat", "2", "--parallel-runs"])
    cfg = _config(ns)
    assert (cfg.a, cfg.n_batch, cfg.n_ubatch, cfg.checkpoint_min_step, cfg.ctx_checkpoints) == ("G1", 512, 256, 64, 3)
    assert (cfg.engine, cfg.timeout, cfg.holdout, cfg.repeat, cfg.parallel_runs) == ("live", 9.0, ("x.jsonl",), 2, True)


async def test_the_setup_screens_defaults_and_choices_are_the_tables():
    app = ReplayerApp(session=FIXTURES / "pi/small-v3.jsonl", default_speed=0.0)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, SetupScreen))
        s = app.screen
        cfg = s.read_config()
        # the backend control shows the GPU preset's backend, which the config leaves to be derived
        assert cfg == dataclasses.replace(ReplayConfig(), backend=cfg.backend)
        assert cfg.backend == presets.gpu(ReplayConfig().gpu).backend
        for sel in ("engine", "mode"):
            assert [v for _, v in s.query_one(f"#{sel}", Select)._options] == \
                [v for v, _ in options.option(sel).choices]
            assert s.query_one(f"#{sel}", Select).value == options.option(sel).default
        # a config from the CLI shows in the fields and reads back as it came
        ns = build_parser().parse_args(["replay", SESSION, "-b", "512", "-ub", "256", "--cms", "64",
                                        "--ctx-checkpoints", "3"])
        for wid, name in TEXT_FIELDS:
            s.query_one(f"#{wid}", Input).value = options.option(name).text(_config(ns))
        back = s.read_config()
        assert (back.n_batch, back.n_ubatch, back.checkpoint_min_step, back.ctx_checkpoints) == (512, 256, 64, 3)


async def test_the_setup_refuses_what_the_cli_refuses(capsys):
    app = ReplayerApp(session=FIXTURES / "pi/small-v3.jsonl", default_speed=0.0)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, SetupScreen))
        s = app.screen
        s.query_one("#n-ubatch", Input).value = "0"
        s.action_start()
        await pilot.pause()
        assert isinstance(app.screen, SetupScreen)
        shown = str(s.query_one("#setup-error", Static).render())
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["replay", SESSION, "-ub", "0"])
    cli_line = capsys.readouterr().err
    assert exc.value.code == 2 and "0 is out of range (1…16,777,216)" in cli_line
    assert "--ubatch-size: 0 is out of range (1…16,777,216)" in shown
