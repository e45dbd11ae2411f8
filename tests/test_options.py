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


# -- the saved settings: the setup's replay options, rendered from the same table ------------------

def test_the_saved_settings_hold_only_what_differs_from_the_clis_defaults():
    assert options.to_settings(ReplayConfig()) == {}
    cfg = dataclasses.replace(ReplayConfig(), a="10001", b="9859", engine="live", n_batch=512, checkpoint_min_step=64)
    saved = options.to_settings(cfg)
    assert saved == {"a": "10001", "b": "9859", "engine": "live", "batch_size": 512, "cms": 64}
    back, problems = options.from_settings(saved)
    assert problems == [] and back == cfg
    # each name is the CLI's: the same dict parsed as arguments gives the same config
    argv = ["replay", SESSION, *(x for k, v in saved.items() for x in (options.option(k).flags[-1], str(v)))]
    assert _config(build_parser().parse_args(argv)) == cfg


@pytest.mark.parametrize("name,value,why", [
    ("batch_size", 0, "out of range"), ("batch_size", "lots", "not a whole number"), ("batch_size", True, "whole"),
    ("engine", "warp", "not one of simulated, live"), ("gpu", "no-such-gpu", "not a preset"),
    ("model", ["x"], "not a name"), ("a", "not a build", ""),
])
def test_a_saved_value_the_cli_would_refuse_is_left_out_and_named(name, value, why):
    back, problems = options.from_settings({name: value, "ubatch_size": 256, "unknown": 1})
    assert back == dataclasses.replace(ReplayConfig(), n_ubatch=256), "the refused value keeps its default"
    assert len(problems) == 1 and problems[0].startswith(f"replay option {name}: ") and why in problems[0]


async def test_the_setup_remembers_its_replay_options_in_the_saved_settings():
    from replayer.core import settings

    app = ReplayerApp(session=FIXTURES / "pi/small-v3.jsonl", default_speed=0.0)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, SetupScreen))
        s = app.screen
        assert s.read_config() == dataclasses.replace(ReplayConfig(), backend=s.read_config().backend)
        s.query_one("#n-batch", Input).value = "1024"
        s.query_one("#cms", Input).value = "128"
        s.query_one("#build-a", Select).value = "10001"
        s.query_one("#build-b-custom", Input).value = "10500"  # a release the list does not offer
        s.action_start()
        await wait_for(pilot, lambda: getattr(app.screen, "comparison", None) is not None)
    saved = settings.load_settings()[0].replay
    assert {k: saved[k] for k in ("a", "b", "batch_size", "cms")} == {"a": "10001", "b": "10500", "batch_size": 1024,
                                                                       "cms": 128}
    assert set(saved) <= {"a", "b", "batch_size", "cms", "backend"}, "only what differs from the defaults"
    again = ReplayerApp(session=FIXTURES / "pi/small-v3.jsonl", default_speed=0.0)  # a later run of the app
    async with again.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(again.screen, SetupScreen))
        s = again.screen
        assert s.query_one("#n-batch", Input).value == "1024" and s.query_one("#cms", Input).value == "128"
        assert s.query_one("#build-a", Select).value == "10001"
        assert s.query_one("#build-b-custom", Input).value == "10500"
        back = s.read_config()
        assert (back.a, back.b, back.n_batch, back.checkpoint_min_step) == ("10001", "10500", 1024, 128)
        assert back.n_ubatch == ReplayConfig().n_ubatch, "what was never changed keeps the CLI's default"


async def test_a_refused_saved_option_is_said_and_the_default_applies():
    from replayer.core import settings

    settings.save_settings(replay={"batch_size": 0, "ubatch_size": 256})
    app = ReplayerApp(session=FIXTURES / "pi/small-v3.jsonl", default_speed=0.0)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: isinstance(app.screen, SetupScreen))
        s = app.screen
        assert s.query_one("#n-batch", Input).value == str(ReplayConfig().n_batch)
        assert s.query_one("#n-ubatch", Input).value == "256"
        assert any("replay option batch_size: 0 is out of range" in n.message for n in app._notifications)
