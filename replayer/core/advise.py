"""What a user can change to make this session's prefill faster, ranked by modelled time.

Each candidate change (a newer build, ``-b``/``-ub``, the checkpoint flags, ``--swa-full``,
``--cache-ram``, ``-np``/``--kv-unified``, and client-side switches) is a ``Variant``: a
set of setting overrides. An ``Evaluator`` prices a setting on the session; the resume
evaluator here simulates the one resume request (the pipeline's engine for run A). A session
evaluator (per-turn cache) can price the same variants, including those that only matter
across turns (``modes``), without changing the ranking code.

Every recommendation carries the llama-server command line to use and a ``replayer advise``
command that takes that setting as today's, so the predicted time can be checked.
"""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from replayer.core.builds import changes
from replayer.core.builds.catalog import GENERATIONS, REPRESENTATIVE_BUILD, Build, parse_build
from replayer.core.compare import Comparison
from replayer.core.engine.run_summary import RunSummary
from replayer.core.errors import ReplayerError
from replayer.core.hardware import presets
from replayer.core.engine.base import engine_for
from replayer.core.prepare import RUNS, Prepared, ReplayConfig, prepare, run_spec, span_rule
from replayer.core.prompt.layout import PromptLayout
from replayer.core.session import Session, load_session
from replayer.core.what_ifs import WHAT_IFS

#: a change must save at least this share of today's time to be recommended
MIN_SAVING = 0.005


@dataclass(frozen=True)
class Settings:
    """Everything advise varies: the replay config plus server flags the replay does not model."""

    config: ReplayConfig
    swa_full: bool = False
    cache_ram: int | None = None  # MiB; None: the build's default
    n_parallel: int = 1
    kv_unified: bool = False
    ctx_size: int | None = None  # None: large enough for the prompt

    @property
    def build(self) -> Build:
        return parse_build(self.config.a)

    def simulated_config(self) -> ReplayConfig:
        """The replay config that simulates these flags: ``--swa-full`` gives an SWA model a
        full-size cache, which never needs checkpoints (a plain one)."""
        if self.swa_full and presets.model(self.config.model).memory == "swa":
            return dataclasses.replace(self.config, memory="plain")
        return self.config

    def slot_cells(self) -> int | None:
        """The cells of one slot: ``-c`` split over the ``-np`` slots unless ``--kv-unified``
        shares them; None: large enough for the prompt."""
        if self.ctx_size is None:
            return None
        return self.ctx_size if self.kv_unified else self.ctx_size // max(1, self.n_parallel)

    def with_(self, **kw: Any) -> "Settings":
        cfg_fields = {f.name for f in dataclasses.fields(ReplayConfig)}
        cfg = dataclasses.replace(self.config, **{k: v for k, v in kw.items() if k in cfg_fields})
        return dataclasses.replace(self, config=cfg, **{k: v for k, v in kw.items() if k not in cfg_fields})

    def server_flags(self) -> list[str]:
        c = self.config
        out = ["-b", str(c.n_batch), "-ub", str(c.n_ubatch), "--ctx-checkpoints", str(c.ctx_checkpoints)]
        if c.checkpoint_min_step is not None:
            out += ["--checkpoint-min-step", str(c.checkpoint_min_step)]
        if self.swa_full:
            out.append("--swa-full")
        if self.cache_ram is not None:
            out += ["--cache-ram", str(self.cache_ram)]
        if self.ctx_size is not None:
            out += ["-c", str(self.ctx_size)]
        out += ["-np", str(self.n_parallel)]
        if self.kv_unified:
            out.append("--kv-unified")
        return out

    def server_command(self) -> str:
        b = self.build
        head = f"llama-server (b{b.effective_number})"
        return f"{head} -m MODEL.gguf " + " ".join(self.server_flags())

    def advise_args(self, session: str) -> list[str]:
        """``replayer advise`` arguments that take this setting as today's."""
        c = self.config
        args = ["advise", session, "--build", str(c.a), "--gpu", c.gpu, "--model", c.model]
        if c.backend:
            args += ["--backend", c.backend]
        if c.calibration:
            args += ["--calibration", c.calibration]
        return args + self.server_flags() + ["--json"]


@dataclass(frozen=True)
class Variant:
    kind: str  # upgrade | batch | checkpoint-min-step | ctx-checkpoints | swa-full | cache-ram | parallel | client
    title: str
    overrides: dict
    side: str = "server"  # or "client": a switch of the agent, not the server
    modes: frozenset = frozenset({"resume", "session"})  # where it can change the time
    tradeoff: str = ""
    why_not: str = ""  # said when the evaluator's mode cannot price it


@dataclass
class Outcome:
    prompt_ms: float
    batches: int
    checkpoints: int
    error: str | None = None  # the setting cannot run this session at all


class Evaluator(Protocol):
    mode: str

    def evaluate(self, s: Settings) -> Outcome: ...


class ResumeEvaluator:
    """Prices a setting by simulating the session's resume request (an empty cache)."""

    mode = "resume"

    def __init__(self, path: str | Path, session: Session, known: Prepared | None = None) -> None:
        self.path = str(path)
        self.session = session
        self._prepared: dict[str, Prepared] = {}
        # one layout per span rule (most builds share one): the prompt is laid out once or twice, not per build
        self._layouts: dict[tuple, PromptLayout] = {}
        self._known = known if known is not None and known.session is session else None
        if known is not None:  # a replay's own layouts: no second layout of the same prompt
            for run, build in zip(("A", "B"), known.config.builds()):
                self._layouts.setdefault(span_rule(build, known.config.template_obj()), known.layouts[run])

    def _prep(self, cfg: ReplayConfig) -> Prepared:
        key = cfg.a
        if key not in self._prepared:
            k = self._known  # the replay's request, when this setting rebuilds the same one
            same = k is not None and (cfg.system_prompt, cfg.tools) == (k.config.system_prompt, k.config.tools)
            self._prepared[key] = prepare(self.path, dataclasses.replace(cfg, b=cfg.a), session=self.session,
                                          layouts=self._layouts, request=k.request if same else None)
        return dataclasses.replace(self._prepared[key], config=dataclasses.replace(cfg, b=cfg.a))

    def evaluate(self, s: Settings) -> Outcome:
        prep = self._prep(s.simulated_config())
        n = prep.n_tokens
        per_slot = s.slot_cells()
        if per_slot is not None and n >= per_slot:
            return Outcome(float("inf"), 0, 0, f"the {n:,}-token prompt does not fit a slot's "
                                                f"{per_slot:,} cells (-c {s.ctx_size} / -np {s.n_parallel})")
        spec = run_spec("A", prep.config)
        run = RunSummary.from_events("A", engine_for(spec.engine).events(spec, prep))
        return Outcome(run.prompt_ms, run.n_batches, len(run.created))


def variants(s: Settings) -> list[Variant]:
    """Every single change worth pricing from setting ``s``."""
    c = s.config
    b = s.build
    out: list[Variant] = []
    for gen in GENERATIONS[GENERATIONS.index(b.generation) + 1:]:
        n = REPRESENTATIVE_BUILD[gen]
        if n <= b.effective_number:
            continue
        ch = changes.introducing(gen.value)
        pr = f", {ch.name}" if ch and ch.pr else ""
        out.append(Variant("upgrade", f"upgrade to b{n} ({gen.value}: {gen.label}{pr})", {"a": str(n)}))
    for ub in (512, 1024, 2048, 4096):
        nb = max(c.n_batch, ub)
        if (nb, ub) != (c.n_batch, c.n_ubatch):
            out.append(Variant("batch", f"-b {nb} -ub {ub}", {"n_batch": nb, "n_ubatch": ub},
                               tradeoff="a larger -ub needs a larger compute buffer" if ub > c.n_ubatch else ""))
    today_step = c.checkpoint_min_step if c.checkpoint_min_step is not None else b.default_checkpoint_min_step
    for step in (1024, 4096, 16384, 32768, 65536):
        if step != today_step:
            out.append(Variant("checkpoint-min-step", f"--checkpoint-min-step {step}", {"checkpoint_min_step": step},
                               tradeoff="fewer checkpoints: a later edit of the conversation restores from "
                                        "further back" if step > today_step else ""))
    for n in (0, 8, 64):
        if n != c.ctx_checkpoints:
            out.append(Variant("ctx-checkpoints", f"--ctx-checkpoints {n}", {"ctx_checkpoints": n},
                               tradeoff="no checkpoints: a hybrid or SWA model re-processes the whole prompt "
                                        "on every cache miss" if n == 0 else ""))
    if not s.swa_full:
        out.append(Variant("swa-full", "--swa-full", {"swa_full": True},
                           tradeoff="a full-size cache for the sliding-window layers (more memory)"))
    if not s.cache_ram:
        out.append(Variant("cache-ram", "--cache-ram 8192", {"cache_ram": 8192}, modes=frozenset({"session"}),
                           why_not="a resume starts on an empty server: the RAM prompt cache only helps "
                                   "between requests (session mode)"))
    if s.n_parallel > 1:
        out.append(Variant("parallel", "-np 1", {"n_parallel": 1}))
    if not s.kv_unified:
        out.append(Variant("parallel", "--kv-unified", {"kv_unified": True}))
    for w in WHAT_IFS:  # priced by a session evaluator, whose settings carry the switch as a field
        if not getattr(s, w.field, False):
            out.append(Variant("client", w.title, {w.field: True}, side="client", modes=frozenset({"session"}),
                               tradeoff=w.tradeoff, why_not="a client-side switch: priced per turn in session mode"))
    return out


@dataclass
class Advice:
    settings: Settings
    session: str
    mode: str
    today: Outcome
    recommendations: list[dict] = field(default_factory=list)
    no_effect: list[dict] = field(default_factory=list)
    server: dict | None = None  # session mode with the user's command line: its fixes (advise_session)

    def to_dict(self) -> dict:
        b = self.settings.build
        ch = changes.introducing(b.generation.value)
        extra = {"server": self.server} if self.server is not None else {}
        return {**extra, 
            "session": self.session, "mode": self.mode, "build": b.label, "generation": b.generation.value,
            "generation_meaning": b.generation.label, "generation_pr": ch.pr if ch else None,
            "today": {"prompt_ms": _ms(self.today.prompt_ms), "batches": self.today.batches,
                      "checkpoints": self.today.checkpoints, "error": self.today.error,
                      "command": self.settings.server_command()},
            "recommendations": self.recommendations, "no_effect": self.no_effect,
        }


def _changed_flags(today: list[str], new: list[str]) -> list[str]:
    """The flags of ``new`` that differ from today's, each with its value."""
    def pairs(flags: list[str]) -> list[list[str]]:
        out: list[list[str]] = []
        for f in flags:
            if f.startswith("-") and not f.lstrip("-").isdigit():
                out.append([f])
            else:
                out[-1].append(f)
        return out

    old = pairs(today)
    return [x for p in pairs(new) if p not in old for x in p]


def _ms(x: float) -> float | None:
    return None if x == float("inf") else round(x, 1)


def advise(path: str | Path, settings: Settings, session: Session | None = None,
           evaluator: Evaluator | None = None) -> Advice:
    cfg = settings.config
    presets.model(cfg.model)  # simulated advice needs a model preset: a clear error otherwise
    s = session or load_session(path, cfg.format, images=cfg.images)
    ev = evaluator or ResumeEvaluator(path, s)
    today = ev.evaluate(settings)
    adv = Advice(settings, str(path), ev.mode, today)
    priced: list[tuple[Variant, Settings, Outcome]] = []
    for v in variants(settings):
        if ev.mode not in v.modes:
            adv.no_effect.append({"kind": v.kind, "title": v.title, "side": v.side, "reason": v.why_not})
            continue
        new = settings.with_(**v.overrides)
        priced.append((v, new, ev.evaluate(new)))
    upgrades = sorted((p for p in priced if p[0].kind == "upgrade"), key=lambda p: p[2].prompt_ms)
    if upgrades and upgrades[0][2].prompt_ms < today.prompt_ms:
        # the knobs once more on the best newer build: a fix can make a flag matter
        v0, s0, _ = upgrades[0]
        for v in variants(s0):
            if v.kind in ("upgrade", "client") or ev.mode not in v.modes:
                continue
            new = s0.with_(**v.overrides)
            combo = Variant("upgrade", f"{v0.title}, then {v.title}", {**v0.overrides, **v.overrides},
                            tradeoff=v.tradeoff)
            priced.append((combo, new, ev.evaluate(new)))
    rows = []
    for v, new, out in priced:
        saving = today.prompt_ms - out.prompt_ms
        base = today.prompt_ms if today.prompt_ms != float("inf") else None
        row = {"kind": v.kind, "title": v.title, "side": v.side,
               "flags": _changed_flags(settings.server_flags(), new.server_flags()), "command": new.server_command(),
               "replayer_command": "replayer " + shlex.join(new.advise_args(str(path))),
               "prompt_ms": _ms(out.prompt_ms), "batches": out.batches, "checkpoints": out.checkpoints,
               "saving_ms": _ms(saving) if out.error is None else None,
               "saving_pct": round(100 * saving / base, 1) if base and out.error is None else None,
               "tradeoff": v.tradeoff, "error": out.error}
        if v.kind == "upgrade":
            row["build"] = new.config.a
            row["install"] = f"replayer builds install {new.config.a}"
        if out.error is None and (today.error is not None or saving > MIN_SAVING * today.prompt_ms):
            rows.append(row)
        else:
            why = out.error or ("no change in the modelled time" if abs(saving) <= MIN_SAVING * today.prompt_ms
                                else f"slower by {-saving / 1000:,.1f} s")
            adv.no_effect.append({"kind": v.kind, "title": v.title, "side": v.side, "reason": why})
    # best first; a change without a trade-off wins a tie
    rows.sort(key=lambda r: (r["prompt_ms"], bool(r["tradeoff"]), r["title"]))
    # one combination at most: the best, and only when it beats its upgrade alone
    alone = {r["build"]: r["prompt_ms"] for r in rows if r["kind"] == "upgrade" and ", then " not in r["title"]}
    combos = [r for r in rows if ", then " in r["title"]
              and r["prompt_ms"] < (1 - MIN_SAVING) * alone.get(r["build"], float("inf"))]
    adv.recommendations = [r for r in rows if ", then " not in r["title"] or (combos and r is combos[0])]
    return adv


def settings_from(config: ReplayConfig, build: str) -> Settings:
    return Settings(dataclasses.replace(config, a=str(build), b=str(build)))


#: the cost named by a loss whose ideal was measured: a run that batched ideally
MEASURED = "measured in run"


@dataclass(frozen=True)
class BatchingLoss:
    """A run's prompt time against the same prompt in full ``n_batch`` batches, priced by the
    same cost: what the schedule's breaks (user starts, checkpoints) cost this run."""

    run: str
    build: str
    run_ms: float
    ideal_ms: float
    n_batches: int
    ideal_batches: int
    n_batch: int
    cost: str  # the cost model or fitted line that priced the ideal

    @property
    def lost_ms(self) -> float:
        return self.run_ms - self.ideal_ms

    @property
    def lost_pct(self) -> float:
        return 100 * self.lost_ms / self.run_ms if self.run_ms else 0.0

    def line(self) -> str:
        lost = ("nothing" if self.lost_pct < 1  # within the model's rounding: nothing to win
                else f"{self.lost_ms / 1000:,.1f} s ({self.lost_pct:.0f} %)")
        full = f"{self.ideal_batches} full -b {self.n_batch} batch{'es' if self.ideal_batches != 1 else ''}"
        took = (f"took {self.ideal_ms / 1000:,.1f} s in run {self.cost[-1]}" if self.cost.startswith(MEASURED)
                else f"take {self.ideal_ms / 1000:,.1f} s")
        return (f"{self.run} {self.build} lost {lost} vs ideal batching: {self.n_batches} decode "
                f"call{'s' if self.n_batches != 1 else ''}; {full} {took}")

    def to_dict(self) -> dict[str, Any]:
        return {"ideal_ms": round(self.ideal_ms, 1), "lost_ms": round(self.lost_ms, 1),
                "lost_pct": round(self.lost_pct, 1), "batches": self.n_batches,
                "ideal_batches": self.ideal_batches, "n_batch": self.n_batch, "cost": self.cost,
                "text": self.line()}


def batching_loss(prep: Prepared, cmp: Comparison) -> dict[str, BatchingLoss]:
    """Each run whose prefill completed, against its prompt in full ``n_batch`` batches.

    The prompt is the run's own (a live run's tokens as the server counted them); the ideal
    is priced by the replay's cost model (or ``--calibration``). A live run without a
    calibration is priced by a line fitted to both runs' batches: the cost belongs to the
    machine and the model, not to the build, so one line prices both runs and their ideals.
    A live run that already batched ideally measured the ideal, for itself and for the other
    run of the same prompt: a fitted line can be far off on a few tiny batches.
    The run's checkpoint copies are added to a modelled ideal: only the batching differs.
    """
    from replayer.core.hardware.cost import CostModel, batch_ms

    cfg = prep.config
    knobs = cfg.knobs()
    runs = [r for r in (cmp.a, cmp.b) if r.prefill_complete and r.batches]

    def prompt(r: RunSummary) -> range:
        """The ideal batches' starts over the tokens ``r`` processed."""
        n_tokens = r.finished.n_tokens if r.finished else r.n_tokens
        first = n_tokens - (r.finished.n_processed if r.finished else n_tokens - r.n_past)
        return range(first, n_tokens, knobs.n_batch)

    def priced() -> CostModel | None:
        if cfg.engine == "simulated" or cfg.calibration:
            return prep.cost
        from replayer.core import calibration

        try:
            fit = calibration.fit_cost([b for r in runs for b in r.batches], knobs.n_ubatch_eff, match_totals=True,
                                       q_tile=calibration.q_tile_for(cfg.live_target("A").backend))
        except ReplayerError:
            return None  # too few timed batches to price anything
        return fit.line("a line fitted to both runs' batches")

    # a run that batched ideally measured the ideal: for itself, and (live) for the other run
    # of the same prompt, better than a line fitted to both
    measured = {(p.start, p.stop): r for r in runs if [b.start for b in r.batches] == list(p := prompt(r))}
    out: dict[str, BatchingLoss] = {}
    cost: CostModel | None = None
    for r in runs:
        starts = prompt(r)
        best = measured.get((starts.start, starts.stop))
        if best is not None and (r.engine != "simulated" or best is r):
            ideal, name = best.prompt_ms, f"{MEASURED} {best.run}"
        else:
            cost = cost or priced()
            if cost is None:
                continue
            ideal = sum(batch_ms(cost, s, min(knobs.n_batch, starts.stop - s), knobs.n_ubatch_eff) for s in starts)
            if r.engine == "simulated":
                ideal += sum(cost.checkpoint_ms(c.size_mib) for c in r.created)
            name = cost.name
        out[r.run] = BatchingLoss(r.run, r.build, r.prompt_ms, ideal, r.n_batches, len(starts), knobs.n_batch, name)
    return out


def advice_for(prep: Prepared, cmp: Comparison) -> list[str]:
    """The verdict's advice for a finished comparison: what each build's generation means and
    what the fix is, the time each run lost against ideal batching, and the best change for
    the slower run's build.

    The app's verdict and the Markdown report print these same lines.
    """
    if cmp.a.failed or cmp.b.failed:
        return []
    slower = "A" if cmp.a.prompt_ms >= cmp.b.prompt_ms else "B"
    lines = [line for run in RUNS if (line := generation_line(prep, run))]
    lines += [loss.line() for loss in batching_loss(prep, cmp).values()]
    return lines + verdict_advice(prep, slower)[1:]


def generation_line(prep: Prepared, run: str) -> str | None:
    """What run ``run``'s build is (generation, the PR that started it) and what fixes it."""
    try:
        b = parse_build(prep.config.build_spec(run))
    except ReplayerError:
        return None  # a binary path: no generation to explain
    g = b.generation
    ch = changes.introducing(g.value)
    span = f"b{g.first_build}–b{g.last_build}" if g.last_build else f"b{g.first_build}+"
    if not g.first_build:
        span = f"≤ b{g.last_build}"
    line = f"{run} {b.label} is {g.value} ({span}{', ' + ch.name if ch else ''}: {g.label})"
    knobs = prep.config.knobs()
    helps = []
    if g.user_breaks == "every_user":
        fix = changes.introducing("G2a")
        return line + f" — fix: upgrade to ≥ b{fix.first_with} ({fix.name})"  # no flag avoids the breaks
    if g.user_breaks == "where_checkpoint_due":
        helps.append("a larger -cms means fewer checkpoint breaks")
    if knobs.n_ubatch_eff < knobs.n_batch:
        helps.append(f"-ub {knobs.n_batch} makes each batch one ubatch")
    return line + (" — " + "; ".join(helps) if helps else "")


def verdict_advice(prep: Prepared, slower: str) -> list[str]:
    """What the slower run's build is (generation, the PR that made it), and the best change."""
    cfg = prep.config
    spec = cfg.build_spec(slower)
    line = generation_line(prep, slower)
    if line is None:
        return []
    lines = [line]
    try:
        adv = advise(prep.session.path, settings_from(cfg, spec), session=prep.session,
                     evaluator=ResumeEvaluator(prep.session.path, prep.session, known=prep))
    except ReplayerError:
        return lines
    if adv.recommendations:
        r = adv.recommendations[0]
        flags = " ".join(r["flags"])
        how = "; ".join(x for x in (r.get("install"), flags if flags not in r["title"] else "") if x)
        gain = (f"saves {r['saving_ms'] / 1000:,.1f} s ({r['saving_pct']:.0f} %) on this session"
                if r["saving_pct"] is not None else f"makes this session run ({r['prompt_ms'] / 1000:,.1f} s)")
        lines.append(f"advice: {r['title']} {gain}" + (f" — {how}" if how else ""))
    else:
        lines.append("advice: no flag or build change makes this session faster in the model")
    return lines
