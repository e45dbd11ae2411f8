"""The replay pipeline shared by the CLI and the app: session → request → layouts → events.

A ``ReplayConfig`` holds every choice a user makes; ``prepare`` does the import and
layout work once; ``simulated_events`` yields one run's events. The live engine plugs in
with the same ``RunSpec`` and the same events.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import orjson

from replayer.core import paths
from replayer.core.builds.catalog import Build, parse_build
from replayer.core.engine import events as ev
from replayer.core.engine.schedule import Knobs
from replayer.core.engine.simulate import RunSpec, simulate
from replayer.core.errors import ReplayerError
from replayer.core.hardware import cost as costmod
from replayer.core.hardware import presets
from replayer.core.prompt import templates
from replayer.core.prompt.layout import PromptLayout, compute_layout
from replayer.core.session import ChatRequest, Session, load_session
from replayer.core.session.request import request_from_files

#: the chat template family each model preset uses, for estimate layouts
MODEL_TEMPLATE = {
    "qwen3.6-35b-a3b-q8_0": "qwen3-coder",
    "llama-8b-q4_0": "llama3",
    "gpt-oss-20b": "gpt-oss",
    "qwen3-30b-a3b-q8_0": "chatml",
    "qwen3-8b-q4_k_m": "chatml",
}


@dataclass
class ReplayConfig:
    a: str = "9859"
    b: str = "10001"
    engine: str = "simulated"
    gpu: str = presets.DEFAULT_GPU
    model: str = presets.DEFAULT_MODEL
    backend: str | None = None
    n_batch: int = 2048
    n_ubatch: int = 512
    checkpoint_min_step: int | None = None
    ctx_checkpoints: int = 32
    memory: str | None = None  # override the model preset's memory kind
    tokenizer: str | None = None  # None: the GGUF model's own, else "estimate"
    template: str | None = None
    format: str | None = None
    calibration: str | None = None  # a line fitted by `replay --engine live --calibrate`
    system_prompt: str | None = None  # path
    tools: str | None = None  # path
    images: str = "omit"

    @classmethod
    def seed(cls, **kw: Any) -> "ReplayConfig":
        """The #25213 scenario: RX 9070 XT Vulkan, Qwen3.6-35B-A3B Q8_0, -ub 2048."""
        return cls(**{"n_batch": 2048, "n_ubatch": 2048, **kw})

    def builds(self) -> tuple[Build, Build]:
        return parse_build(self.a), parse_build(self.b)

    def model_preset(self) -> presets.ModelPreset:
        """The model preset, or the profile read from the header of the user's GGUF."""
        return presets.model(self.model)

    @property
    def tokenizer_eff(self) -> str:
        """The tokenizer asked for; a GGUF model brings its own vocabulary and template by default."""
        if self.tokenizer:
            return self.tokenizer
        mp = self.model_preset()
        return f"gguf:{mp.id}" if mp.gguf is not None else "estimate"

    def knobs(self) -> Knobs:
        mp = self.model_preset()
        return Knobs(n_batch=self.n_batch, n_ubatch=self.n_ubatch, n_ctx_checkpoints=self.ctx_checkpoints,
                     checkpoint_min_step=self.checkpoint_min_step, memory=self.memory or mp.memory,
                     n_swa=mp.n_swa or 256).validate()

    def template_obj(self) -> templates.Template | None:
        if self.template:
            return templates.resolve(self.template)
        if self.tokenizer_eff.startswith(("gguf:", "server:")):
            return None  # the model's / server's own template
        return templates.bundled(MODEL_TEMPLATE.get(self.model, templates.DEFAULT_TEMPLATE))

    def settings(self) -> dict[str, Any]:
        g = presets.gpu(self.gpu)
        tpl = self.template_obj()
        return {"gpu": self.gpu, "backend": self.backend or g.backend, "model": self.model,
                "n_batch": self.n_batch, "n_ubatch": self.n_ubatch, "ctx_checkpoints": self.ctx_checkpoints,
                "checkpoint_min_step": self.checkpoint_min_step, "tokenizer": self.tokenizer_eff,
                "template": self.template or (tpl.name if tpl else "model")}


@dataclass
class Prepared:
    config: ReplayConfig
    session: Session
    request: ChatRequest
    layouts: dict[str, PromptLayout] = field(default_factory=dict)  # per run

    @property
    def n_tokens(self) -> int:
        return next(iter(self.layouts.values())).n_tokens

    def meta(self) -> dict[str, Any]:
        """What a report says about the session (CLI output and the app's exports)."""
        meta = {"session": self.session.path, "format": self.session.format,
                "user_starts": len(self.layouts["A"].user_starts), "notes": self.request.notes}
        mp = self.config.model_preset()
        if mp.gguf is not None:
            meta["model"] = mp.gguf.summary()  # what the header said: memory kind, window, experts…
        return meta


def prepare(path: str | Path, config: ReplayConfig, session: Session | None = None) -> Prepared:
    s = session or load_session(path, config.format, images=config.images)
    req = request_from_files(s, config.system_prompt, config.tools)
    prep = Prepared(config, s, req)
    a, b = config.builds()
    tpl = config.template_obj()
    cache: dict[tuple, PromptLayout] = {}
    for run, build in (("A", a), ("B", b)):
        key = (build.token_space_spans, build.tool_delimiters_for_qwen3_coder, build.minicpm5_tool_delimiter)
        if key not in cache:
            cache[key] = compute_layout(req.messages, req.body.get("tools"), template=tpl,
                                        tokenizer=config.tokenizer_eff, build=build)
        prep.layouts[run] = cache[key]
    return prep


def run_spec(run: str, build: Build, config: ReplayConfig) -> RunSpec:
    return RunSpec(run=run, build=build, knobs=config.knobs(), label=f"{run}: {build.label}",
                   checkpoint_mib=config.model_preset().checkpoint_mib, settings=config.settings())


def cost_for(config: ReplayConfig) -> costmod.CostModel:
    if config.calibration:
        return calibrated_cost(config.calibration)
    g = presets.gpu(config.gpu)
    return costmod.cost_model(g, config.model_preset(), presets.check_backend(g, config.backend))


def _presets_doc() -> dict[str, Any]:
    """The user's presets file (calibrations saved by ``--calibrate``); {} when absent."""
    f = paths.presets_file()
    if not f.exists():
        return {}
    try:
        return dict(orjson.loads(f.read_bytes()))
    except (OSError, ValueError):
        raise ReplayerError(f"cannot read {f}") from None


def calibrations() -> dict[str, dict]:
    return dict(_presets_doc().get("calibrations", {}))


def save_calibration(name: str, fixed_ms: float, per_token_ms: float, source: dict[str, Any]) -> Path:
    data = _presets_doc()
    data.setdefault("calibrations", {})[name] = {"fixed_ms": fixed_ms, "per_token_ms": per_token_ms, **source}
    f = paths.presets_file()
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))
    return f


def calibrated_cost(name: str) -> costmod.CostModel:
    cal = calibrations()
    if name not in cal:
        from replayer.core.errors import did_you_mean

        hint = did_you_mean(name, list(cal))
        raise ReplayerError(f"no calibration {name!r}" + (f"; saved: {', '.join(cal)}" if cal else
                            "; run a live replay with --calibrate first"),
                            hint=f"did you mean {hint}?" if hint else None)
    c = cal[name]
    return costmod.LineCost(name=f"calibration {name}", fixed_ms=float(c["fixed_ms"]),
                            per_token_ms=float(c["per_token_ms"]), attn_ms=float(c.get("attn_ms", 0.0)),
                            kv_ms=float(c.get("kv_ms", 0.0)),
                            source=str(c.get("model", "")))


def simulated_events(prep: Prepared, run: str) -> Iterator[ev.Event]:
    a, b = prep.config.builds()
    build = a if run == "A" else b
    spec = run_spec(run, build, prep.config)
    yield from simulate(spec, prep.layouts[run].prompt_spans(), cost_for(prep.config))


def all_simulated(prep: Prepared) -> list[ev.Event]:
    return list(simulated_events(prep, "A")) + list(simulated_events(prep, "B"))


def demo_session_path() -> Path:
    from importlib import resources

    return Path(str(resources.files("replayer.data").joinpath("demo/seed-session.jsonl")))

