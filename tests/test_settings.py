"""Typed settings and calibration files: untrusted JSON read as models, the environment wins, one error line."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import orjson
import pytest

from replayer.core import calibration, settings
from replayer.core.errors import ReplayerError
from replayer.core.hardware import cost, presets

from conftest import REPO


@pytest.fixture(autouse=True)
def _own_config_dir(tmp_path, monkeypatch):
    """These tests damage settings files on purpose: never the one other tests share."""
    monkeypatch.setenv("REPLAYER_CONFIG_DIR", str(tmp_path / "config"))


def test_settings_file_then_environment(monkeypatch, tmp_path):
    monkeypatch.delenv("REPLAYER_EXPORT_DIR", raising=False)
    settings.save_settings(theme="high-contrast", export_dir=tmp_path / "reports")
    s, problem = settings.load_settings()
    assert problem is None and s.theme == "high-contrast" and s.export_folder() == tmp_path / "reports"
    monkeypatch.setenv("REPLAYER_THEME", "replayer-light")
    assert settings.load_settings()[0].theme == "replayer-light"
    assert orjson.loads(settings.settings_file().read_bytes())["theme"] == "high-contrast"  # env never saved


@pytest.mark.parametrize("content", [b"{not json", b"[1, 2]", b'{"theme": 5}', b'{"export_dir": {"a": 1}}'])
def test_a_damaged_settings_file_gives_defaults_and_says_why(content):
    f = settings.settings_file()
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_bytes(content)
    s, problem = settings.load_settings()
    assert s.theme == settings.DEFAULT_THEME and problem and str(f) in problem
    settings.save_settings(theme="high-contrast")  # the next save replaces the damaged file
    assert settings.load_settings() == (settings.load_settings()[0], None)
    assert settings.load_settings()[0].theme == "high-contrast"


async def test_the_app_says_a_damaged_settings_file_and_goes_on():
    from replayer.ui.app import ReplayerApp

    f = settings.settings_file()
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_bytes(b'{"export_dir": {"a": [1]}, "theme": "replayer-light"}')
    app = ReplayerApp()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        app.theme = "high-contrast"  # saving over the damaged file must not fail
        await pilot.pause()
        assert any("damaged" in n.message for n in app._notifications)
    assert settings.load_settings()[0].theme == "high-contrast"


def test_calibrations_round_trip_and_are_validated():
    cal = calibration.Calibration(fixed_ms=1.5, per_token_ms=0.002, backend="cpu", model="/m/tiny.gguf")
    f = calibration.save_calibration("cpu-tiny", cal)
    assert calibration.calibrations()["cpu-tiny"] == cal
    line = calibration.calibrated_cost("cpu-tiny")
    assert line.ubatch_ms(100, 0) == pytest.approx(1.5 + 0.2)
    doc = orjson.loads(f.read_bytes())
    doc["calibrations"]["bad"] = {"fixed_ms": -1, "per_token_ms": "x"}
    f.write_bytes(orjson.dumps(doc))
    with pytest.raises(ReplayerError, match="damaged"):
        calibration.calibrations()


def test_a_damaged_presets_file_is_one_line_in_the_cli():
    f = settings.load_settings()[0].calibrations_path()
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_bytes(b'{"calibrations": {"x": {"fixed_ms": "fast"}}}')
    r = subprocess.run([sys.executable, "-m", "replayer.cli", "presets"], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.count("\n") == 1
    assert "damaged" in r.stderr


def test_the_seed_line_is_a_field_of_its_preset():
    gpu, model = presets.gpu("rx9070xt"), presets.model("qwen3.6-35b-a3b-q8_0")
    assert isinstance(cost.cost_model(gpu, model, "vulkan"), cost.LineCost)
    assert isinstance(cost.cost_model(gpu, model, "rocm"), cost.RooflineCost)  # no line measured there
    bare = dataclasses.replace(model, measured_lines=())
    assert isinstance(cost.cost_model(gpu, bare, "vulkan"), cost.RooflineCost)
