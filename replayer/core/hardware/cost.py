"""The prefill cost model: time of one ``llama_decode`` batch, ubatch by ubatch.

Per ubatch of ``b`` tokens at context depth ``d`` (``spec/perf-model.md`` §4)::

    t(b, d) = τ·L + sqrt(T_mem² + T_mm²) + T_att          (× h for gated-delta-net hybrids)

plus, when the model does not fit the GPU, the cost of the expert weights left in host
RAM: streamed to the GPU for every ubatch of ≥ 32 tokens, computed on the CPU below that.
That per-ubatch fixed cost is why fragmenting a resume into hundreds of small batches
collapses throughput under partial offload (318 → 131 tok/s) and costs only a few percent
on fully resident models.

A ``LineCost`` (fixed ms per ubatch + ms per token) stands in where a measurement is better
than the roofline: the seed scenario's calibration, and what ``--calibrate`` fits from a
live run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterator, Protocol

from replayer.core.hardware import presets
from replayer.core.hardware.perf_data import ModelConstants
from replayer.core.hardware.presets import GPUPreset, ModelPreset

OP_OFFLOAD_MIN_BATCH = 32  # ggml-backend: host weights are used on the GPU from this batch size
#: ggml-cpu's flash attention tiles queries in blocks of GGML_FA_TILE_Q (ggml-cpu/common.h; 64 in
#: b9859 and b10001): a ubatch with fewer tokens takes the row-by-row ``_one_chunk`` path of
#: ``ggml_compute_forward_flash_attn_ext_f16`` instead of the tiled one, ~20x dearer per token×depth
FA_TILE_Q = 64
CHECKPOINT_COPY_BPS = 11.5e9  # 186.4 MiB in 17 ms (ik_llama.cpp #1346)
OFFLOAD_RESERVE_BYTES = 4.5e9  # KV cache, compute buffer, mmproj, --fit-target kept free (§7 estimate)


class CostModel(Protocol):
    name: str

    def ubatch_ms(self, b: int, depth: int) -> float: ...

    def checkpoint_ms(self, size_mib: float) -> float: ...


def ubatches(start: int, n_tokens: int, n_ubatch: int) -> Iterator[tuple[int, int]]:
    """(size, depth) of each ubatch of a batch: ``n_ubatch`` tokens each, the last shorter."""
    pos, end = start, start + n_tokens
    while pos < end:
        b = min(n_ubatch, end - pos)
        yield b, pos
        pos += b


def attn_work(b: int, depth: int, q_tile: int = 0) -> float:
    """The query×key pairs a ubatch of ``b`` tokens at ``depth`` computes in causal attention.

    With ``q_tile`` (the CPU backend: ``FA_TILE_Q``) a ubatch of at least that many tokens takes
    ggml-cpu's tiled flash attention (``ggml_compute_forward_flash_attn_ext_tiled``), which
    computes queries in tiles of ``q_tile`` rows, zero-padding the last one, and each tile
    reads the keys up to its last row: a 65-token ubatch costs two whole tiles, twice the
    pairs of its 65 rows. Batches cut at every message start are often just over a tile."""
    if q_tile and b >= q_tile:
        full, rest = divmod(b, q_tile)
        pairs = q_tile * (full * depth + q_tile * full * (full + 1) / 2)
        return pairs + (q_tile * (depth + b) if rest else 0.0)
    return b * (depth + (b + 1) / 2)


def price_memo(cost: CostModel) -> dict[tuple[int, int], float]:
    """The model's one-ubatch prices by (tokens, depth), kept on the model while it lives.

    A price is a pure function of what ``ubatch_ms`` reads, the ubatch's size and depth, so a
    price looked up is the float computed before. A session prices the same batches again and
    again: each return to the main thread after a subagent re-processes it on a build that
    breaks at every tool result (the same batches as the last time), and build B re-prices
    most of build A's turns. A model without an instance dict keeps no memo (a fresh one)."""
    d = getattr(cost, "__dict__", None)
    if d is None:
        return {}
    return d.setdefault("_prices", {})


def batch_ms(cost: CostModel, start: int, n_tokens: int, n_ubatch: int) -> float:
    """A batch costs the sum of its ubatches, each its own graph evaluation."""
    if n_tokens <= n_ubatch:  # the common case in a fragmented prefill: one ubatch
        return cost.ubatch_ms(n_tokens, start)
    return sum(cost.ubatch_ms(b, depth) for b, depth in ubatches(start, n_tokens, n_ubatch))


def _u(b: int, k: float, e: float) -> float:
    """Fraction of routed experts touched by b tokens (uniform routing)."""
    if e <= 1:
        return 0.0
    return 1.0 - (1.0 - k / e) ** b


@dataclass
class RooflineCost:
    name: str
    tau: float
    bw: float
    p: float
    p_e: float
    bh: float
    bh_e: float
    p_mv: float
    b_mv: int
    p_a: float
    h: float
    model: ModelConstants
    w_host: float = 0.0  # bytes of expert weights left in host RAM
    h2d_bps: float = 16.7e9
    host_bps: float = 70e9
    cpu_flops: float = 2.4e12
    _per_b: dict[int, tuple[float, float, float, float, float]] = field(
        default_factory=dict, init=False, repr=False, compare=False)

    def ubatch_ms(self, b: int, depth: int) -> float:
        if self.w_host and not self.model.W_e:
            return self._dense_offload_ms(b, depth)
        per_b = self._per_b.get(b)
        if per_b is None:
            per_b = self._per_b[b] = self._size_terms(b)
        mem_b, t_mm, att_b, half, host = per_b
        m = self.model
        t_mem = (mem_b + m.kv * depth) / self.bw
        t = self.tau * m.L + math.hypot(t_mem, t_mm) + att_b * (depth + half) / self.p_a
        if self.w_host:
            t += host
        return t * self.h * 1000.0

    def _size_terms(self, b: int) -> tuple[float, float, float, float, float]:
        """What a ubatch's time depends on besides its depth, for ``b`` tokens: computed once per
        size (a session prices thousands of ubatches of a few hundred sizes), with the same
        operations in the same order as written out in full, so the sums are the same floats.
        (weights read, matmul time, attention's att·b, (b+1)/2, host-RAM experts' time)."""
        m = self.model
        n_ne, n_e_tot, n_e_act, w_e = m.N_ne, m.N_e_tot, m.N_e_act, m.W_e
        u = _u(b, m.k, m.E) if m.moe else 0.0
        host_frac = min(1.0, self.w_host / w_e) if w_e and self.w_host else 0.0
        w_e_dev = w_e * (1 - host_frac)
        if b <= self.b_mv:
            t_mm = 2 * (n_ne + n_e_act * (1 - host_frac)) * b / self.p_mv
        else:
            t_mm = (2 * n_ne * (b + self.bh) / self.p
                    + 2 * (n_e_act * b + n_e_tot * u * self.bh_e) * (1 - host_frac) / self.p_e)
        if b >= OP_OFFLOAD_MIN_BATCH:
            host = self.w_host / self.h2d_bps  # every touched-or-not expert is copied per ubatch
        else:
            host = self.w_host * u / self.host_bps + 2 * n_e_act * host_frac * b / self.cpu_flops
        return m.W_ne + w_e_dev * u, t_mm, m.att * b, (b + 1) / 2, host

    def _dense_offload_ms(self, b: int, depth: int) -> float:
        """A dense model with whole layers in host RAM: from 32 tokens their weights are copied
        to the GPU and computed there; below, the CPU computes those layers."""
        m = self.model
        frac = min(1.0, self.w_host / m.W_ne)
        big = b >= OP_OFFLOAD_MIN_BATCH
        n_gpu = m.N_ne * (1.0 if big else 1 - frac)
        t_mem = (m.W_ne * (1 - frac) + m.kv * depth) / self.bw
        t_mm = 2 * n_gpu * (b if b <= self.b_mv else b + self.bh) / (self.p_mv if b <= self.b_mv else self.p)
        t = self.tau * m.L + math.hypot(t_mem, t_mm) + m.att * b * (depth + (b + 1) / 2) / self.p_a
        if big:
            t += self.w_host / self.h2d_bps
        else:
            t += self.w_host / self.host_bps + 2 * m.N_ne * frac * b / self.cpu_flops
        return t * self.h * 1000.0

    def checkpoint_ms(self, size_mib: float) -> float:
        return size_mib * 2**20 / CHECKPOINT_COPY_BPS * 1000.0


@dataclass
class LineCost:
    """``fixed_ms + per_token_ms·b + attn_ms·attn_work(b, depth, q_tile) + kv_ms·depth`` per ubatch,
    plus ``attn_small_ms·b·(depth + (b+1)/2)`` for a ubatch of fewer than ``FA_TILE_Q`` tokens.

    The attention term is the roofline's ``T_att`` with one fitted constant, ``kv_ms`` its
    ``kv·depth/BW``: every ubatch reads the whole KV cache once, however few tokens it has
    (``--calibrate`` leaves it at 0: see ``calibration._features``).
    ``attn_small_ms`` is the extra attention cost of a short ubatch on the CPU backend, whose
    flash attention handles fewer than 64 queries row by row (measured: a 62-token batch at
    depth 1,443 took 250 ms where a 126-token one took 26 ms; docs/benchmarks.md). All three
    are 0 for the seed line (whose per-token cost already averages the depth of that
    session). Small ubatches take the CPU path when the model is partially offloaded.
    """

    name: str
    fixed_ms: float
    per_token_ms: float
    small_batch: RooflineCost | None = None
    source: str = ""
    attn_ms: float = 0.0
    kv_ms: float = 0.0
    attn_small_ms: float = 0.0
    q_tile: int = 0  # attention computed in whole query tiles of this many rows (0: per row)

    def ubatch_ms(self, b: int, depth: int) -> float:
        if self.small_batch is not None and b < OP_OFFLOAD_MIN_BATCH:
            return self.small_batch.ubatch_ms(b, depth)
        t = self.fixed_ms + self.per_token_ms * b + self.kv_ms * depth
        if self.attn_ms:  # 0 on the seed lines, which every default replay prices with
            t += self.attn_ms * attn_work(b, depth, self.q_tile)
        if b < FA_TILE_Q and self.attn_small_ms:
            t += self.attn_small_ms * attn_work(b, depth)
        return t

    def checkpoint_ms(self, size_mib: float) -> float:
        return size_mib * 2**20 / CHECKPOINT_COPY_BPS * 1000.0


def host_bytes(gpu: GPUPreset, model: ModelPreset) -> float:
    """Weight bytes that ``--fit`` leaves in host RAM when the model does not fit the GPU:
    experts first for a MoE model, whole layers of a dense one."""
    if gpu.unified:
        return 0.0
    c = model.c
    total = c.W_ne + c.W_e
    spill = total - (gpu.memory_bytes - OFFLOAD_RESERVE_BYTES)
    return max(0.0, min(spill, c.W_e if c.W_e else c.W_ne))


#: Decode calls replayer's schedule makes for the bundled seed session (Qwen3.6 template,
#: -b 2048 -ub 2048, hybrid memory): b10001 (G2b) and b9859 (G1). The calibration notes
#: assumed 45 calls for the fixed build; the faithful G2b schedule also breaks where
#: checkpoints are due, so the line is re-solved from the same two measurements with
#: these counts (see docs/design.md, "Seed calibration").
SEED_GOOD_CALLS = 63
SEED_BAD_CALLS = 312


def seed_line(record_id: str = "vulkan_rx9070xt_qwen36_35B_A3B_Q8_seed") -> tuple[float, float]:
    """(fixed s per ubatch, s per token) solved from 131.03 and 318 tok/s on 91,463 tokens."""
    seed = presets.calibration().partial_offload_record(record_id).seed_numbers
    if seed is None:  # pragma: no cover - a preset names a line without its measurements
        raise KeyError(f"calibration record {record_id} has no seed numbers")
    t_bad = seed.t_master_s
    t_good = seed.tokens / seed.tps_good
    t_f = (t_bad - t_good) / (SEED_BAD_CALLS - SEED_GOOD_CALLS)
    c = (t_good - SEED_GOOD_CALLS * t_f) / seed.tokens
    return t_f, c


def cost_model(gpu: GPUPreset, model: ModelPreset, backend: str | None = None) -> CostModel:
    backend = backend or gpu.backend
    pid = gpu.moe_profile if model.moe else gpu.dense_profile
    pp = presets.profile(pid).params
    comp, mem = presets.scale(gpu, pid)  # 1, 1 on the device the profile was fitted on
    if backend != gpu.backend:
        f_comp, f_mem = gpu.backend_factors.get(backend, (1.0, 1.0))
        comp, mem = comp * f_comp, mem * f_mem
    h = pp.hybrid_gdn_factor
    if model.c.hybrid and h == 1.0:
        h = 1.29  # gated-delta-net hybrids vs their active parameters (vulkan_8060s fit, §5)
    w_host = host_bytes(gpu, model)
    roof = RooflineCost(
        name=f"{gpu.id}/{backend}/{model.id}", tau=pp.tau_s_per_layer, bw=pp.bw_Bps * mem,
        p=pp.p_gemm_flops * comp, p_e=pp.p_expert_flops * comp, bh=pp.bh_tokens,
        bh_e=pp.bh_tokens if pp.bh_expert_tokens is None else pp.bh_expert_tokens,
        p_mv=(pp.p_mv_flops or 1.0) * comp, b_mv=pp.b_mv, p_a=pp.p_attn_flops * comp, h=h, model=model.c, w_host=w_host, h2d_bps=gpu.h2d_bps,
        host_bps=gpu.host_bps,
    )
    line = dict(model.measured_lines).get((gpu.id, backend))
    if line and w_host:
        t_f, c = seed_line(line)
        return LineCost(name=f"{gpu.id}/{backend}/{model.id} (seed calibration)",
                        fixed_ms=t_f * 1000.0, per_token_ms=c * 1000.0,
                        small_batch=roof,
                        source="llama.cpp #25062/#25213: 131.03 tok/s on 91,463 tokens vs 318 tok/s fixed")
    return roof
