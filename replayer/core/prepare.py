"""What a replay is asked to do (``ReplayConfig``) and the work done once before any run (``prepare``).

The config holds every choice a user makes, in the CLI or the app, and is the one place
that turns those choices into knobs, a template, a cost model and a run's spec: both
front ends build a config and hand it to the orchestrator (``core/replay.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from replayer.core.builds.catalog import Build, parse_build
from replayer.core.errors import ReplayerError
from replayer.core.hardware import cost as costmod
from replayer.core.hardware import presets
from replayer.core.prompt import templates
from replayer.core.prompt.layout import PromptLayout, compute_layout
from replayer.core.prompt.template_inputs import STEPFUN_TRIM_FROM, trims_for
from replayer.core.runspec import DEFAULT_KNOBS, DEFAULT_TIMEOUT_S, Knobs, LiveTarget, RunSpec
from replayer.core.session import ChatRequest, Session, load_session
from replayer.core.session.formats.prompt_log import FORMAT as PROMPT_LOG  # the server's prompts, each a request
from replayer.core.session.request import request_from_files

#: the chat template family each model preset uses, for estimate layouts
MODEL_TEMPLATE = {
    "qwen3.6-35b-a3b-q8_0": "qwen3-coder",
    "llama-8b-q4_0": "llama3",
    "gpt-oss-20b": "gpt-oss",
    "qwen3-30b-a3b-q8_0": "chatml",
    "qwen3-8b-q4_k_m": "chatml",
}

RUNS = ("A", "B")
ENGINES = ("simulated", "live")


@dataclass
class ReplayConfig:
    a: str = "9859"
    b: str = "10001"
    engine: str = "simulated"
    gpu: str = presets.DEFAULT_GPU
    model: str = presets.DEFAULT_MODEL  # a preset id (simulated) or a GGUF path (live)
    backend: str | None = None
    n_batch: int = DEFAULT_KNOBS.n_batch
    n_ubatch: int = DEFAULT_KNOBS.n_ubatch
    checkpoint_min_step: int | None = None
    ctx_checkpoints: int = DEFAULT_KNOBS.n_ctx_checkpoints
    memory: str | None = None  # override the model preset's memory kind
    tokenizer: str | None = None  # None: the GGUF model's own (simulated --model PATH.gguf), else estimate
    template: str | None = None
    format: str | None = None
    calibration: str | None = None  # a line fitted by `replay --engine live --calibrate`
    system_prompt: str | None = None  # path
    tools: str | None = None  # path
    images: str = "omit"
    # live runs
    server: str | None = None  # attach run A to this server
    server_b: str | None = None  # attach run B
    server_log: str | None = None  # run A's server log (-lv 4), for checkpoints in attach mode
    observed: str | None = None  # a prompt folder's server log: the observed side (core/session_observed.py)
    ctx_size: int | None = None
    timeout: float = DEFAULT_TIMEOUT_S
    parallel_runs: bool = False
    threads: int | None = None  # live: the servers' -t/-tb (None: llama-server's default)
    calibrate: bool = False
    holdout: tuple[str, ...] = ()  # sessions --calibrate checks its line on (run live, then simulated)
    repeat: int = 1  # --calibrate: live runs of each session and build; each batch timed by their median

    @classmethod
    def seed(cls, **kw: Any) -> "ReplayConfig":
        """The #25213 scenario: RX 9070 XT Vulkan, Qwen3.6-35B-A3B Q8_0, -ub 2048."""
        return cls(**{"n_batch": 2048, "n_ubatch": 2048, **kw})

    def builds(self) -> tuple[Build, Build]:
        return self._build(self.a), self._build(self.b)

    def _build(self, spec: str) -> Build:
        """A build number or generation; for a live run also a binary, whose number it reports."""
        if self.engine == "live":
            from replayer.core.builds.manager import find_source_build, source_build

            if (rec := find_source_build(spec, self.backend or "cpu")) is not None:
                return source_build(rec, live=True)  # a tree with unknown rules still runs live
        if self.engine == "live" and ("/" in spec or Path(spec).expanduser().exists()):
            from replayer.core.builds.manager import resolve_binary

            try:
                return resolve_binary(spec, self.backend or "cpu").as_build(live=True)
            except ReplayerError as exc:
                # the run itself reports it (RunFailed) and the other run goes on; until then
                # the layout follows the newest span rules
                return replace(parse_build("latest"), note=str(exc))
        try:
            return parse_build(spec)
        except ReplayerError:
            from replayer.core.builds.manager import named_build  # a source build, by its label

            return named_build(spec)

    def build_spec(self, run: str) -> str:
        return self.a if run == "A" else self.b

    def model_preset(self) -> presets.ModelPreset | None:
        """The model preset, or the profile read from the header of the user's GGUF; None for a
        live run's GGUF (the server reports what the model is)."""
        if self.engine == "live" and self.model.lower() not in presets.MODELS:
            return None
        return presets.model(self.model)

    @property
    def tokenizer_eff(self) -> str:
        """The tokenizer asked for; a GGUF model brings its own vocabulary and template by default."""
        if self.tokenizer:
            return self.tokenizer
        mp = self.model_preset()
        return f"gguf:{mp.id}" if mp is not None and mp.gguf is not None else "estimate"

    def knobs(self) -> Knobs:
        mp = self.model_preset()
        # a live GGUF: the server reports the real memory kind; until then assume it checkpoints
        memory = self.memory or (mp.memory if mp else "recurrent")
        return Knobs(n_batch=self.n_batch, n_ubatch=self.n_ubatch, n_ctx_checkpoints=self.ctx_checkpoints,
                     checkpoint_min_step=self.checkpoint_min_step, memory=memory,
                     n_swa=(mp.n_swa if mp else 0) or DEFAULT_KNOBS.n_swa).validate()

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

    def live_target(self, run: str) -> LiveTarget:
        server = self.server if run == "A" else self.server_b
        return LiveTarget(build_spec=self.build_spec(run), model=Path(self.model).expanduser(),
                          backend=self.backend or "cpu", ctx_size=self.ctx_size, timeout=self.timeout,
                          server=server, server_log=Path(self.server_log).expanduser()
                          if self.server_log and run == "A" else None, threads=self.threads)

    def cost(self) -> costmod.CostModel:
        if self.calibration:
            from replayer.core.calibration import calibrated_cost

            return calibrated_cost(self.calibration)
        g = presets.gpu(self.gpu)
        return costmod.cost_model(g, presets.model(self.model), presets.check_backend(g, self.backend))

    def check(self) -> None:
        """Refuse a config that cannot run, before any work: the same errors in the CLI and the app."""
        if self.engine not in ENGINES:
            raise ReplayerError(f"unknown engine {self.engine!r}; choose {' or '.join(ENGINES)}")
        self.builds()
        self.knobs()
        if self.holdout:
            self._check_holdout()
        if self.repeat != 1 and not (self.calibrate and self.engine == "live"):
            raise ReplayerError("--repeat times a calibration: give it with --engine live --calibrate")
        if self.engine == "simulated":
            self.cost()
            return
        if not (self.server and self.server_b) and Path(self.model).suffix != ".gguf" \
                and not Path(self.model).expanduser().is_file():
            raise ReplayerError(f"--model must be a GGUF file for live replays, got {self.model!r}")

    def _check_holdout(self) -> None:
        if not self.calibrate or self.engine != "live":
            raise ReplayerError("--holdout checks a calibration: give it with --engine live --calibrate")
        if not Path(self.model).expanduser().is_file() or Path(self.model).suffix.lower() != ".gguf":
            raise ReplayerError("--holdout simulates the held-out sessions from the model's GGUF: "
                                f"give --model PATH.gguf (got {self.model!r})")

    def held_out(self) -> tuple["ReplayConfig", "ReplayConfig"]:
        """The configs of a held-out session: its live runs (as the fitted ones, no calibration of
        their own) and its simulation as ``replay S --model M.gguf`` would run it (the GGUF's header,
        vocabulary and template; the line itself is set once it is fitted)."""
        live = replace(self, calibrate=False, holdout=(), repeat=1)
        return live, replace(live, engine="simulated", server=None, server_b=None, server_log=None,
                             calibration=None, backend=None)  # with a line, the backend times nothing


def run_spec(run: str, config: ReplayConfig) -> RunSpec:
    """Run ``run``'s spec: the one place both front ends get knobs, labels and settings from."""
    build = config.builds()[RUNS.index(run)]
    knobs = config.knobs()
    if config.engine == "simulated":
        mp = config.model_preset()
        return RunSpec(run=run, build=build, knobs=knobs, label=f"{run}: {build.label}",
                       checkpoint_mib=mp.checkpoint_mib, settings=config.settings())
    target = config.live_target(run)
    settings = {"n_batch": knobs.n_batch, "n_ubatch": knobs.n_ubatch}
    if not target.server:
        settings = {"backend": target.backend, **settings}
        if target.threads:  # an attached server runs with its own
            settings["threads"] = target.threads
    return RunSpec(run=run, build=build, knobs=knobs, label=f"{run}: {build.label}", settings=settings,
                   engine="attach" if target.server else "live", live=target)


@dataclass
class Prepared:
    config: ReplayConfig
    session: Session
    request: ChatRequest
    layouts: dict[str, PromptLayout] = field(default_factory=dict)  # per run

    @property
    def n_tokens(self) -> int:
        return next(iter(self.layouts.values())).n_tokens

    @cached_property
    def cost(self) -> costmod.CostModel:
        return self.config.cost()

    def meta(self) -> dict[str, Any]:
        """What a report says about the session (CLI output and the app's exports)."""
        meta = {"session": self.session.path, "format": self.session.format,
                "user_starts": len(self.layouts["A"].user_starts), "notes": self.session.notes + self.request.notes,
                "incomplete": self.session.incomplete}
        mp = self.config.model_preset()
        if mp is not None and mp.gguf is not None:
            meta["model"] = mp.gguf.summary()  # what the header said: memory kind, window, experts…
        return meta


def span_rule(build: Build, template: templates.Template | None) -> tuple:
    """What of a build changes this template's rendered prompt or its layout: builds alike
    here share one layout. ``None``: the GGUF's own template, not read yet (assume it may be
    one the server trims for)."""
    trims = template is None or trims_for(template.source)
    return (build.token_space_spans, build.tool_delimiters_for_qwen3_coder, build.minicpm5_tool_delimiter,
            trims and build.effective_number >= STEPFUN_TRIM_FROM)


def prepare(path: str | Path, config: ReplayConfig, session: Session | None = None,
            layouts: dict[tuple, PromptLayout] | None = None, request: ChatRequest | None = None) -> Prepared:
    """Import, rebuild the request and lay it out once per distinct span rule of the two builds.

    ``layouts``: layouts by ``span_rule`` already made for this session, request, template
    and tokenizer (and filled in here) — the advice prices dozens of builds and flags on one
    prompt and must not lay it out again for each. ``request``: the request already rebuilt
    from ``session`` with this config's system prompt and tools (the replay's, which the advice
    holds while it prices): a second copy of every message would be held beside it."""
    config.check()
    s = session or load_session(path, config.format, images=config.images)
    if s.format == PROMPT_LOG:
        raise ReplayerError(not_a_resume(s.path))
    req = request if request is not None else request_from_files(s, config.system_prompt, config.tools)
    prep = Prepared(config, s, req)
    tpl = config.template_obj()
    cache: dict[tuple, PromptLayout] = {} if layouts is None else layouts
    for run, build in zip(RUNS, config.builds()):
        key = span_rule(build, tpl)
        if key not in cache:
            cache[key] = compute_layout(req.messages, req.body.get("tools"), template=tpl,
                                        tokenizer=config.tokenizer_eff, build=build)
        prep.layouts[run] = cache[key]
    return prep


def not_a_resume(path: str | Path) -> str:
    """Why a prompt folder has no resume replay (the CLI's and the app's one line)."""
    return f"{path} holds llama-server's prompts, not a conversation to resume: replay it with --mode session"


def demo_session_path() -> Path:
    from importlib import resources

    return Path(str(resources.files("replayer.data").joinpath("demo/seed-session.jsonl")))
