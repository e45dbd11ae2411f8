"""GPU presets: spec sources, scaling of devices without a fit, custom devices, refused backends."""

from __future__ import annotations

import re
import subprocess
import sys

import orjson
import pytest

from replayer.core.errors import ReplayerError
from replayer.core.hardware import cost, presets
from replayer.core.replay import ReplayConfig

from conftest import FIXTURES, REPO

WANTED = {"rtx5090", "rtx4090", "rtx4080", "rtx3090", "rtx3060", "rx7900xtx", "rx9070xt", "a100", "h100",
          "m2-ultra", "m3-ultra", "m4-max", "strix-halo", "cpu-generic"}


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "replayer.cli", *args], capture_output=True, text=True, cwd=REPO)


def test_every_preset_cites_its_spec_sheet():
    doc = orjson.loads(cli("presets", "--json").stdout)
    gpus = {g["id"]: g for g in doc["gpus"]}
    assert WANTED <= set(gpus)
    for g in gpus.values():
        assert g["bandwidth_gbs"] > 0 and g["backends"] and g["backend"] in g["backends"]
        # the source names where the numbers come from and states the bandwidth it gives
        assert re.search(r"(amd|nvidia|apple)\.com|datasheet|whitepaper", g["source"], re.I), g["id"]
        assert f"{g['bandwidth_gbs']:g}" in g["source"].replace(",", "") or "TB/s" in g["source"], g["id"]


def test_fitted_devices_are_not_rescaled():
    for pid, gid in presets.PROFILE_DEVICE.items():
        assert presets.scale(presets.GPUS[gid], pid) == (1.0, 1.0)


def _ms(gpu: str, model: str = "llama-8b-q4_0", b: int = 512, depth: int = 8192) -> float:
    return ReplayConfig(gpu=gpu, model=model).cost().ubatch_ms(b, depth)


def test_scaled_devices_follow_their_specs():
    # bigger and faster cards of one family are faster on the same model and batch
    assert _ms("rtx5090") < _ms("rtx4090") < _ms("rtx4080")
    assert _ms("rtx3090") < _ms("rtx3060")
    assert _ms("h100") < _ms("a100")
    assert _ms("m3-ultra") < _ms("m4-max")
    assert _ms("rx7900xtx") < _ms("rx9070xt")
    comp, bw = presets.scale(presets.gpu("rtx5090"), "cuda_rtx4090_dense8B")
    assert bw == pytest.approx(1792 / 1008) and comp == pytest.approx(419 / 330.3)


def test_a_dense_model_that_does_not_fit_streams_its_layers():
    g = presets.gpu("rtx3060")  # 12 GB
    assert cost.host_bytes(g, presets.model("llama-8b-q4_0")) == 0
    big = presets.model("qwen3-30b-a3b-q8_0")  # 30 GiB of MoE: experts spill
    assert cost.host_bytes(g, big) > 15e9


def test_custom_gpu():
    g = presets.gpu("custom:vram=24,bw=1000,tflops=150,pcie=32,backend=cuda")
    assert (g.memory_bytes, g.bw_gbs, g.tflops, g.backends, g.like) == (24e9, 1000.0, 150.0, ("cuda",), "rtx4090")
    assert g.h2d_bps == pytest.approx(min(16.7e9, 0.52 * 32e9))
    # the same numbers as a preset's give that preset's speed
    same = presets.gpu("custom:vram=24,bw=1008,tflops=330.3,pcie=32,backend=cuda")
    assert ReplayConfig(gpu=same.id, model="llama-8b-q4_0").cost().ubatch_ms(512, 0) == pytest.approx(_ms("rtx4090", b=512, depth=0))
    r = cli("replay", str(FIXTURES / "pi/small-v3.jsonl"), "--gpu", "custom:vram=16,bw=500,tflops=80,pcie=16", "--json")
    assert r.returncode == 0, r.stderr
    assert orjson.loads(r.stdout)["runs"][0]["prompt_ms"] > 0


@pytest.mark.parametrize("spec, text", [
    ("custom:vram=24,bw=1000", "lacks tflops, pcie"),
    ("custom:vram=24,bw=fast,tflops=1,pcie=1", "must be numbers"),
    ("custom:vram=24,bw=1,tflops=1,pcie=1,colour=red", "bad custom GPU field"),
    ("custom:vram=0,bw=1,tflops=1,pcie=1", "must be > 0"),
])
def test_custom_gpu_errors_are_one_line(spec, text):
    with pytest.raises(ReplayerError, match=text):
        presets.gpu(spec)
    r = cli("replay", str(FIXTURES / "pi/small-v3.jsonl"), "--gpu", spec)
    assert r.returncode == 2 and text in r.stderr and r.stderr.count("\n") == 1


@pytest.mark.parametrize("gpu, backend, choices", [
    ("rx9070xt", "sycl", "vulkan, rocm"), ("rx7900xtx", "cuda", "vulkan, rocm"),
    ("rtx4090", "metal", "cuda, vulkan"), ("rtx4090", "rocm", "cuda, vulkan"), ("m4-max", "cuda", "metal"),
    ("cpu", "vulkan", "cpu"),
])
def test_a_backend_the_gpu_cannot_run_is_refused_with_the_choices(gpu, backend, choices):
    r = cli("replay", str(FIXTURES / "pi/small-v3.jsonl"), "--gpu", gpu, "--backend", backend)
    assert r.returncode == 2 and f"choose one of {choices}" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_rocm_on_an_amd_card_is_faster_than_vulkan():
    vk = ReplayConfig(gpu="rx7900xtx", model="qwen3-8b-q4_k_m").cost().ubatch_ms(512, 0)
    hip = ReplayConfig(gpu="rx7900xtx", model="qwen3-8b-q4_k_m", backend="rocm").cost().ubatch_ms(512, 0)
    assert hip < vk
