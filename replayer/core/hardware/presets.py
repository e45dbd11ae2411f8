"""Backends, GPU presets and model presets: the cost model's inputs.

Device parameters come from the fitted profiles in ``data/perf-calibration.json`` (copied
from the project's calibration notes, with their sources); model constants from its
``models`` table. Presets only choose which profile and constants apply and add what a
replay needs besides speed: memory size (partial offload), the kind of model memory
(which decides checkpoints) and the checkpoint size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from replayer.core.errors import ReplayerError, did_you_mean
from replayer.core.hardware.perf_data import ModelConstants, PerfCalibration, Profile, perf_calibration

BACKENDS = {
    "cuda": "CUDA (NVIDIA)",
    "vulkan": "Vulkan (any GPU)",
    "rocm": "ROCm/HIP (AMD)",
    "metal": "Metal (Apple)",
    "sycl": "SYCL (Intel)",
    "cpu": "CPU only",
}


def calibration() -> PerfCalibration:
    """``data/perf-calibration.json``, validated (``perf_data``)."""
    return perf_calibration()


def profile(pid: str) -> Profile:
    return perf_calibration().profile(pid)


@dataclass(frozen=True)
class GPUPreset:
    """A device: its spec-sheet numbers (with their source) and the fitted profiles that time it.

    A device without a fit of its own (``like`` another preset) uses that preset's profiles
    scaled by the spec ratios: memory-bound terms by bandwidth, compute terms by fp16
    tensor throughput (perf-model §4). A fitted device's scale is 1.
    """

    id: str
    name: str
    vendor: str
    backend: str  # native backend of the fitted profile
    backends: tuple[str, ...]  # backends this device can run (others are refused)
    memory_bytes: float
    unified: bool  # unified memory: nothing is "offloaded"
    dense_profile: str
    moe_profile: str
    bw_gbs: float = 0.0  # memory bandwidth, GB/s (spec)
    tflops: float | None = None  # dense fp16 tensor/matrix TFLOPS (spec; None: not published)
    pcie_gbs: float = 64.0  # host link, GB/s per direction (x16 link rate)
    source: str = ""  # where the spec numbers come from
    host_bps: float = 70e9  # host RAM bandwidth for the CPU path of small batches
    #: relative speed of other backends on this device: (compute factor, memory factor), sources in notes
    backend_factors: dict[str, tuple[float, float]] = field(default_factory=dict)
    like: str | None = None  # the fitted preset whose profiles this one scales
    notes: str = ""

    @property
    def h2d_bps(self) -> float:
        """Effective host→device streaming of mmap'd weights: ≈ half the link rate, at most the
        16.7 GB/s measured over PCIe 4.0/5.0 x16 (perf-model §0, §2e)."""
        return min(16.7e9, 0.52 * self.pcie_gbs * 1e9)


@dataclass(frozen=True)
class ModelPreset:
    id: str
    name: str
    constants: str  # key in calibration().models
    memory: str  # plain | swa | recurrent (hybrid)
    size_gib: float
    checkpoint_mib: float  # size of one context checkpoint (0 for plain)
    n_swa: int = 0
    notes: str = ""
    #: measured lines that replace the roofline when the model spills to host RAM:
    #: ((GPU id, backend), id of a ``partial_offload`` record of the calibration file) pairs
    measured_lines: tuple[tuple[tuple[str, str], str], ...] = ()
    gguf: Any = field(default=None, compare=False)  # a GGUFModel when read from the user's file

    @property
    def c(self) -> ModelConstants:
        if self.gguf is not None:
            return self.gguf.constants()
        return perf_calibration().models[self.constants]

    @property
    def moe(self) -> bool:
        return self.c.moe

    @property
    def needs_checkpoints(self) -> bool:
        return self.memory in ("swa", "recurrent")


_NV_ADA = "NVIDIA Ada Lovelace GPU architecture whitepaper (FP16 tensor, FP16 accumulate, dense)"
_NV_AMPERE = "NVIDIA Ampere GA102 GPU architecture whitepaper (FP16 tensor, FP16 accumulate, dense)"
_AMD_RX = "amd.com product specifications (peak half precision FP16)"
_APPLE = "apple.com tech specs (memory bandwidth, GPU cores); Apple publishes no FLOPS: tflops EST = cores × 128 lanes × 2 × clock"

GPUS: dict[str, GPUPreset] = {g.id: g for g in [
    GPUPreset("rx9070xt", "AMD Radeon RX 9070 XT 16 GB", "amd", "vulkan", ("vulkan", "rocm"), 16e9, False,
              "vulkan_rx9070xt_dense8B", "vulkan_rx9070xt_dense8B", 640, 97.3, 64,
              f"{_AMD_RX}: 16 GB GDDR6 256-bit 20 Gbps = 640 GB/s, 97.3 TFLOPS FP16, PCIe 5.0 x16",
              backend_factors={"rocm": (4199 / 2866, 91.1 / 104.3)},
              notes="HIP vs Vulkan factors from pp512/tg128 of Qwen3-8B Q4_K_M on this card (llama.cpp #26663)"),
    GPUPreset("rx7900xtx", "AMD Radeon RX 7900 XTX 24 GB", "amd", "vulkan", ("vulkan", "rocm"), 24e9, False,
              "vulkan_rx9070xt_dense8B", "vulkan_rx9070xt_dense8B", 960, 122.8, 32,
              f"{_AMD_RX}: 24 GB GDDR6 384-bit 20 Gbps = 960 GB/s, 122.8 TFLOPS FP16, PCIe 4.0 x16",
              backend_factors={"rocm": (4199 / 2866, 91.1 / 104.3)}, like="rx9070xt",
              notes="no fit of its own: the RX 9070 XT profile scaled by spec; HIP factors from the 9070 XT"),
    GPUPreset("rtx5090", "NVIDIA GeForce RTX 5090 32 GB", "nvidia", "cuda", ("cuda", "vulkan"), 32e9, False,
              "cuda_rtx4090_dense8B", "cuda_rtx3090_moe", 1792, 419.0, 64,
              "NVIDIA RTX Blackwell GPU architecture whitepaper: 32 GB GDDR7 512-bit 28 Gbps = 1792 GB/s, "
              "419 TFLOPS FP16 tensor (FP16 acc, dense), PCIe 5.0 x16", like="rtx4090",
              notes="no fit of its own: RTX 4090 (dense) / RTX 3090 (MoE) profiles scaled by spec"),
    GPUPreset("rtx4090", "NVIDIA GeForce RTX 4090 24 GB", "nvidia", "cuda", ("cuda", "vulkan"), 24e9, False,
              "cuda_rtx4090_dense8B", "cuda_rtx3090_moe", 1008, 330.3, 32,
              f"{_NV_ADA}: 24 GB GDDR6X 384-bit 21 Gbps = 1008 GB/s, 330.3 TFLOPS, PCIe 4.0 x16",
              notes="MoE uses the RTX 3090 MoE fit scaled by spec (no 4090 MoE sweep found); Vulkan assumed equal"),
    GPUPreset("rtx4080", "NVIDIA GeForce RTX 4080 16 GB", "nvidia", "cuda", ("cuda", "vulkan"), 16e9, False,
              "cuda_rtx4090_dense8B", "cuda_rtx3090_moe", 716.8, 194.9, 32,
              f"{_NV_ADA}: 16 GB GDDR6X 256-bit 22.4 Gbps = 716.8 GB/s, 194.9 TFLOPS, PCIe 4.0 x16", like="rtx4090",
              notes="no fit of its own: RTX 4090 (dense) / RTX 3090 (MoE) profiles scaled by spec"),
    GPUPreset("rtx3090", "NVIDIA GeForce RTX 3090 24 GB", "nvidia", "cuda", ("cuda", "vulkan"), 24e9, False,
              "cuda_rtx3090_dense8B", "cuda_rtx3090_moe", 936, 142.0, 32,
              f"{_NV_AMPERE}: 24 GB GDDR6X 384-bit 19.5 Gbps = 936 GB/s, 142 TFLOPS, PCIe 4.0 x16",
              notes="Vulkan assumed equal to CUDA (no data)"),
    GPUPreset("rtx3060", "NVIDIA GeForce RTX 3060 12 GB", "nvidia", "cuda", ("cuda", "vulkan"), 12e9, False,
              "cuda_rtx3090_dense8B", "cuda_rtx3090_moe", 360, 51.2, 32,
              "nvidia.com RTX 3060 specs: 12 GB GDDR6 192-bit 15 Gbps = 360 GB/s, PCIe 4.0 x16; 51.2 TFLOPS EST "
              f"(28 SMs × 1.78 GHz at the GA102 rate per SM of the {_NV_AMPERE})", like="rtx3090",
              notes="no fit of its own: the RTX 3090 profiles scaled by spec"),
    GPUPreset("a100", "NVIDIA A100 SXM4 80 GB", "nvidia", "cuda", ("cuda", "vulkan"), 80e9, False,
              "cuda_rtx4090_dense8B", "cuda_rtx3090_moe", 2039, 312.0, 32,
              "NVIDIA A100 datasheet: 80 GB HBM2e 2039 GB/s, 312 TFLOPS FP16 tensor (dense), PCIe 4.0 x16 host link",
              like="rtx4090", notes="no fit of its own: RTX 4090 (dense) / RTX 3090 (MoE) profiles scaled by spec"),
    GPUPreset("h100", "NVIDIA H100 SXM5 80 GB", "nvidia", "cuda", ("cuda", "vulkan"), 80e9, False,
              "cuda_rtx4090_dense8B", "cuda_rtx3090_moe", 3350, 989.4, 64,
              "NVIDIA H100 Tensor Core GPU datasheet: 80 GB HBM3 3.35 TB/s, 989.4 TFLOPS FP16 tensor (dense), "
              "PCIe 5.0 x16 host link", like="rtx4090",
              notes="no fit of its own: RTX 4090 (dense) / RTX 3090 (MoE) profiles scaled by spec; "
                    "llama.cpp kernels rarely reach datacenter peaks: an upper bound"),
    GPUPreset("m2-ultra", "Apple M2 Ultra (76-core GPU), 192 GB unified", "apple", "metal", ("metal",), 192e9,
              True, "metal_m2ultra_dense7B", "metal_m2ultra_moe", 800, 27.2, 64,
              f"{_APPLE}: M2 Ultra 800 GB/s, 76 GPU cores at 1.40 GHz"),
    GPUPreset("m3-ultra", "Apple M3 Ultra (80-core GPU), 512 GB unified", "apple", "metal", ("metal",), 512e9,
              True, "metal_m2ultra_dense7B", "metal_m2ultra_moe", 819, 28.7, 64,
              f"{_APPLE}: M3 Ultra 819 GB/s, 80 GPU cores at 1.40 GHz", like="m2-ultra",
              notes="no fit of its own: the M2 Ultra profiles scaled by spec"),
    GPUPreset("m4-max", "Apple M4 Max (40-core GPU), 128 GB unified", "apple", "metal", ("metal",), 128e9,
              True, "metal_m2ultra_dense7B", "metal_m2ultra_moe", 546, 16.2, 64,
              f"{_APPLE}: M4 Max 546 GB/s, 40 GPU cores at 1.58 GHz", like="m2-ultra",
              notes="no fit of its own: the M2 Ultra profiles scaled by spec"),
    GPUPreset("strix-halo", "AMD Radeon 8060S (Ryzen AI Max+ 395), 128 GB unified", "amd", "vulkan",
              ("vulkan", "rocm"), 128e9, True, "vulkan_8060s_moe", "vulkan_8060s_moe", 256, None, 32,
              "amd.com Ryzen AI Max+ 395 specs: 256-bit LPDDR5X-8000 = 256 GB/s, 40 RDNA 3.5 CUs (no FP16 figure)"),
    GPUPreset("cpu-generic", "CPU, 16 cores, DDR5 (Ryzen 9 7950X fit)", "cpu", "cpu", ("cpu",), 1e15, True,
              "cpu_7950x", "cpu_7950x", 83.2, None, 64,
              "amd.com Ryzen 9 7950X specs: dual-channel DDR5-5200 = 83.2 GB/s"),
]}
#: the device each fitted profile was measured on: derived presets scale from its spec
PROFILE_DEVICE = {"cuda_rtx4090_dense8B": "rtx4090", "cuda_rtx3090_dense8B": "rtx3090", "cuda_rtx3090_moe": "rtx3090",
                  "metal_m2ultra_dense7B": "m2-ultra", "metal_m2ultra_moe": "m2-ultra",
                  "vulkan_rx9070xt_dense8B": "rx9070xt", "vulkan_8060s_moe": "strix-halo", "cpu_7950x": "cpu-generic"}
GPU_ALIASES = {"cpu": "cpu-generic", "5090": "rtx5090", "4090": "rtx4090", "4080": "rtx4080", "3090": "rtx3090",
               "3060": "rtx3060", "7900xtx": "rx7900xtx", "9070xt": "rx9070xt"}
#: the fitted device a custom GPU scales, by backend
CUSTOM_LIKE = {"cuda": "rtx4090", "vulkan": "rx9070xt", "rocm": "rx9070xt", "sycl": "rx9070xt", "metal": "m2-ultra",
               "cpu": "cpu-generic"}


def scale(gpu: GPUPreset, profile_id: str) -> tuple[float, float]:
    """(compute, bandwidth) factors from the profile's own device to ``gpu``, by spec sheet."""
    ref = GPUS[PROFILE_DEVICE.get(profile_id, gpu.id)]
    bw = gpu.bw_gbs / ref.bw_gbs if gpu.bw_gbs and ref.bw_gbs else 1.0
    comp = gpu.tflops / ref.tflops if gpu.tflops and ref.tflops else bw
    return comp, bw


def custom_gpu(text: str) -> GPUPreset:
    """``custom:vram=GB,bw=GB/s,tflops=TFLOPS,pcie=GB/s[,backend=…][,unified=1]``."""
    need = ("vram", "bw", "tflops", "pcie")
    usage = f"--gpu custom:{','.join(k + '=…' for k in need)}[,backend=…][,unified=1]"
    vals: dict[str, str] = {}
    for part in filter(None, text.split(":", 1)[1].split(",")):
        k, sep, v = part.partition("=")
        if not sep or k.strip().lower() not in (*need, "backend", "unified"):
            raise ReplayerError(f"bad custom GPU field {part!r}", hint=f"use {usage}")
        vals[k.strip().lower()] = v.strip()
    missing = [k for k in need if k not in vals]
    if missing:
        raise ReplayerError(f"custom GPU lacks {', '.join(missing)}", hint=f"use {usage}")
    try:
        num = {k: float(vals[k]) for k in need}
    except ValueError:
        raise ReplayerError(f"custom GPU fields must be numbers: {text!r}", hint=f"use {usage}") from None
    if any(v <= 0 for v in num.values()):
        raise ReplayerError(f"custom GPU fields must be > 0: {text!r}")
    bk = backend(vals.get("backend", "vulkan"))
    like = GPUS[CUSTOM_LIKE[bk]]
    unified = vals.get("unified", "0").lower() in ("1", "true", "yes")
    return GPUPreset(text, f"custom GPU ({num['vram']:g} GB, {num['bw']:g} GB/s, {num['tflops']:g} TFLOPS)", "custom",
                     bk, (bk,), num["vram"] * 1e9, unified, like.dense_profile, like.moe_profile, num["bw"],
                     num["tflops"], num["pcie"], "user-given", like=like.id,
                     notes=f"the {like.name} profiles scaled by the given spec")


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
    if key.lower().startswith("custom:"):
        return custom_gpu(key)
    return _pick("GPU", GPU_ALIASES.get(key.lower(), key), GPUS)


def model(key: str) -> ModelPreset:
    """A model preset, or the profile of the user's GGUF (header only) when ``key`` is a path."""
    from replayer.core.hardware import gguf_model

    if gguf_model.is_gguf_path(key):
        g = gguf_model.read(key)
        return ModelPreset(g.path, f"{g.name} ({g.arch}, {g.file_type})", "", g.memory, g.weight_bytes / 2**30,
                           g.checkpoint_mib(), n_swa=g.n_swa, gguf=g)
    return _pick("model", key, MODELS)


def check_backend(g: GPUPreset, key: str | None) -> str:
    """The backend to time ``g`` with; one it cannot run is refused with the choices."""
    b = backend(key) if key else g.backend
    if b not in g.backends:
        raise ReplayerError(f"{g.name} cannot run the {b} backend ({BACKENDS[b]}); "
                            f"choose one of {', '.join(g.backends)}")
    return b


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
                  "bandwidth_gbs": g.bw_gbs, "fp16_tflops": g.tflops, "pcie_gbs": g.pcie_gbs,
                  "profile": g.dense_profile, "scaled_from": g.like, "source": g.source} for g in GPUS.values()],
        "models": [{"id": m.id, "name": m.name, "memory": m.memory, "size_gib": m.size_gib,
                    "needs_checkpoints": m.needs_checkpoints, "checkpoint_mib": m.checkpoint_mib}
                   for m in MODELS.values()],
    }
