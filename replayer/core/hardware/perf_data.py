"""``data/perf-calibration.json`` as typed records, validated once when first read.

The file holds the fitted device profiles, the measured partial-offload lines and the
per-model constants of the cost model (``spec/perf-model.md`` §4), with their sources. The
cost model reads only the fields declared here; the notes beside them (fit errors, sources,
formulas) are kept as extra fields for whoever reads the file. A constant that is missing or
of the wrong type fails at the first read, not as a ``KeyError`` deep in a simulation.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

from pydantic import BaseModel, ConfigDict, Field


class ModelConstants(BaseModel):
    """One model's cost-model constants (the file's ``models_fields`` say what each means);
    also what a GGUF header gives (``GGUFModel.constants``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    L: int
    moe: bool = False
    N_ne: float
    N_e_tot: float = 0.0
    N_e_act: float = 0.0
    E: int = 1
    k: int = 1
    W_ne: float
    W_e: float = 0.0
    att: int
    kv: int
    hybrid: bool = False


class ProfileParams(BaseModel):
    """A device profile's fitted constants (``formula`` of the file)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tau_s_per_layer: float
    bw_Bps: float
    p_gemm_flops: float
    p_expert_flops: float
    bh_tokens: float
    bh_expert_tokens: float | None = None  # None: the dense one
    p_mv_flops: float | None = None  # None: no mat-vec path (CPU)
    b_mv: int = 0
    p_attn_flops: float
    hybrid_gdn_factor: float = 1.0


class Profile(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow")

    id: str
    backend: str
    device: str
    params: ProfileParams


class SeedNumbers(BaseModel):
    """The two measurements of the seed scenario (llama.cpp #25062): one prompt, two builds."""

    model_config = ConfigDict(frozen=True, extra="allow")

    tokens: int
    t_master_s: float
    tps_good: float


class PartialOffloadRecord(BaseModel):
    """A measured line for a model that spills to host RAM."""

    model_config = ConfigDict(frozen=True, extra="allow")

    id: str
    backend: str
    seed_numbers: SeedNumbers | None = None


class PerfCalibration(BaseModel):
    model_config = ConfigDict(frozen=True, extra="allow", populate_by_name=True)

    schema_name: str = Field(alias="schema")
    profiles: list[Profile]
    partial_offload: list[PartialOffloadRecord]
    models: dict[str, ModelConstants]

    def profile(self, pid: str) -> Profile:
        for p in self.profiles:
            if p.id == pid:
                return p
        raise KeyError(pid)

    def partial_offload_record(self, record_id: str) -> PartialOffloadRecord:
        for p in self.partial_offload:
            if p.id == record_id:
                return p
        raise KeyError(f"calibration record {record_id} missing")


@lru_cache(maxsize=1)
def perf_calibration() -> PerfCalibration:
    """The bundled file, parsed and validated on first use."""
    raw = resources.files("replayer.data").joinpath("perf-calibration.json").read_bytes()
    return PerfCalibration.model_validate_json(raw)
