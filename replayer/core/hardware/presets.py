"""Backends, GPU presets and model presets: the cost model's inputs.

Device parameters come from the fitted profiles in ``data/perf-calibration.json`` (copied
from the project's calibration notes, with their sources); model constants from its
``models`` table. Presets only choose which profile and constants apply and add what a
replay needs besides speed: memory size (partial offload), the kind of model memory
(which decides checkpoints) and the checkpoint size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

import orjson

from replayer.core.errors import ReplayerError, did_you_mean

BACKENDS = {
    "cuda": "CUDA (NVIDIA)",
    "vulkan": "Vulkan (any GPU)",
    "rocm": "ROCm/HIP (AMD)",
    "metal": "Metal (Apple)",
    "sycl": "SYCL (Intel)",
    "cpu": "CPU only",
}


@lru_cache(maxsize=1)
def calibration() -> dict[str, Any]:
    return orjson.loads(resources.files("replayer.data").joinpath("perf-calibration.json").read_bytes())


def profile(pid: str) -> dict[str, Any]:
    for p in calibration()["profiles"]:
        if p["id"] == pid:
            return p
    raise KeyError(pid)


@dataclass(frozen=True)
class GPUPreset:
    id: str
    name: str
    vendor: str
    backend: str  # native backend of the fitted profile
    backends: tuple[str, ...]  # backends a user may pick for this device
    memory_bytes: float
    unified: bool  # unified memory: nothing is "offloaded"
    dense_profile: str
    moe_profile: str
    h2d_bps: float = 16.7e9  # effective host→device streaming of mmap'd experts (§0: 10–16.7 GB/s)
    host_bps: float = 70e9  # host RAM bandwidth for the CPU path of small batches
    #: relative speed of other backends on this device: (compute factor, memory factor), sources in notes
    backend_factors: dict[str, tuple[float, float]] = field(default_factory=dict)
    notes: str = ""


@dataclass(frozen=True)
class ModelPreset:
    id: str
    name: str
    constants: str  # key in calibration()["models"]
    memory: str  # plain | swa | recurrent (hybrid)
    size_gib: float
    checkpoint_mib: float  # size of one context checkpoint (0 for plain)
    n_swa: int = 0
    notes: str = ""
    #: measured lines that replace the roofline when the model spills to host RAM:
    #: ((GPU id, backend), id of a ``partial_offload`` record of the calibration file) pairs
    measured_lines: tuple[tuple[tuple[str, str], str], ...] = ()

    @property
    def c(self) -> dict[str, Any]:
        return calibration()["models"][self.constants]

    @property
    def moe(self) -> bool:
        return bool(self.c.get("moe"))

    @property
    def needs_checkpoints(self) -> bool:
        return self.memory in ("swa", "recurrent")


GPUS: dict[str, GPUPreset] = {g.id: g for g in [
    GPUPreset("rx9070xt", "AMD Radeon RX 9070 XT 16 GB", "amd", "vulkan", ("vulkan", "rocm"), 16e9, False,
              "vulkan_rx9070xt_dense8B", "vulkan_rx9070xt_dense8B",
              backend_factors={"rocm": (4199 / 2866, 91.1 / 104.3)},
              notes="HIP vs Vulkan factors from pp512/tg128 of Qwen3-8B Q4_K_M on this card (llama.cpp #26663)"),
    GPUPreset("rtx4090", "NVIDIA GeForce RTX 4090 24 GB", "nvidia", "cuda", ("cuda", "vulkan"), 24e9, False,
              "cuda_rtx4090_dense8B", "cuda_rtx3090_moe",
              notes="MoE uses the RTX 3090 MoE fit (no 4090 MoE sweep found); Vulkan assumed equal (no data)"),
    GPUPreset("rtx3090", "NVIDIA GeForce RTX 3090 24 GB", "nvidia", "cuda", ("cuda", "vulkan"), 24e9, False,
              "cuda_rtx3090_dense8B", "cuda_rtx3090_moe", notes="Vulkan assumed equal to CUDA (no data)"),
    GPUPreset("m2-ultra", "Apple M2 Ultra (76-core GPU), 192 GB unified", "apple", "metal", ("metal",), 192e9, True,
              "metal_m2ultra_dense7B", "metal_m2ultra_moe"),
    GPUPreset("strix-halo", "AMD Radeon 8060S (Ryzen AI Max+ 395), 128 GB unified", "amd", "vulkan",
              ("vulkan", "rocm"), 128e9, True, "vulkan_8060s_moe", "vulkan_8060s_moe"),
    GPUPreset("cpu-generic", "CPU, 16 cores, DDR5 (Ryzen 9 7950X fit)", "cpu", "cpu", ("cpu",), 1e15, True,
              "cpu_7950x", "cpu_7950x"),
]}

MODELS: dict[str, ModelPreset] = {m.id: m for m in [
    ModelPreset("qwen3.6-35b-a3b-q8_0", "Qwen3.6-35B-A3B Q8_0 (hybrid gated-DeltaNet MoE)", "qwen35_35B_A3B_Q8_0",
                "recurrent", 34.37, 62.813,
                notes="checkpoint size 62.813 MiB from llama.cpp #24056; 34.37 GiB from #25062",
                measured_lines=((("rx9070xt", "vulkan"), "vulkan_rx9070xt_qwen36_35B_A3B_Q8_seed"),)),
    ModelPreset("llama-8b-q4_0", "Llama 8B Q4_0 (dense)", "llama8B_Q4_0", "plain", 4.33, 0.0),
    ModelPreset("gpt-oss-20b", "gpt-oss 20B MXFP4 (MoE, sliding window)", "gptoss20B_MXFP4", "swa", 12.1, 18.0,
                n_swa=128, notes="SWA checkpoint ≈ 768 cells × 24 KiB of SWA-layer KV per cell (estimate)"),
    ModelPreset("qwen3-30b-a3b-q8_0", "Qwen3-30B-A3B Q8_0 (MoE)", "qwen3_30B_A3B_Q8_0", "plain", 30.25, 0.0),
    ModelPreset("qwen3-8b-q4_k_m", "Qwen3-8B Q4_K_M (dense)", "qwen3_8B_Q4KM", "plain", 4.68, 0.0),
]}

DEFAULT_GPU = "rx9070xt"
DEFAULT_MODEL = "qwen3.6-35b-a3b-q8_0"


def _pick(kind: str, key: str, table: dict) -> Any:
    k = key.lower()
    if k in table:
        return table[k]
    hint = did_you_mean(k, list(table))
    raise ReplayerError(f"unknown {kind} {key!r}; known: {', '.join(table)}",
                        hint=f"did you mean {hint}?" if hint else None)


def gpu(key: str) -> GPUPreset:
    return _pick("GPU", key, GPUS)


def model(key: str) -> ModelPreset:
    return _pick("model", key, MODELS)


def backend(key: str) -> str:
    k = key.lower()
    if k == "hip":
        k = "rocm"
    if k not in BACKENDS:
        hint = did_you_mean(k, list(BACKENDS))
        raise ReplayerError(f"unknown backend {key!r}; known: {', '.join(BACKENDS)}",
                            hint=f"did you mean {hint}?" if hint else None)
    return k


def listing() -> dict[str, Any]:
    return {
        "backends": [{"id": k, "name": v} for k, v in BACKENDS.items()],
        "gpus": [{"id": g.id, "name": g.name, "backend": g.backend, "backends": list(g.backends),
                  "memory_gb": g.memory_bytes / 1e9 if not g.unified or g.vendor != "cpu" else None,
                  "profile": g.dense_profile} for g in GPUS.values()],
        "models": [{"id": m.id, "name": m.name, "memory": m.memory, "size_gib": m.size_gib,
                    "needs_checkpoints": m.needs_checkpoints, "checkpoint_mib": m.checkpoint_mib}
                   for m in MODELS.values()],
    }
