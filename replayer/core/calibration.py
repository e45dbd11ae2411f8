"""Cost lines fitted from live runs (``replay --engine live --calibrate``) and the file that keeps them.

The presets file is the user's, and so untrusted: it is read through pydantic models and
a damaged or mistyped file is one clear error, never a traceback or a half-read line.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from replayer.core.engine import events as ev
from replayer.core.errors import ReplayerError, did_you_mean
from replayer.core.hardware import cost as costmod
from replayer.core.settings import load_settings

if TYPE_CHECKING:
    from replayer.core.engine.run_summary import RunSummary


class HeldOut(BaseModel):
    """One run of a session the line was not fitted on: live, and simulated as a user's
    ``--calibration ID --model M.gguf`` replay of it would be."""

    session: str
    build: str
    live_ms: float = Field(ge=0, allow_inf_nan=False)
    simulated_ms: float = Field(ge=0, allow_inf_nan=False)
    error: float = Field(allow_inf_nan=False)  # simulated / live − 1
    batches_match: bool  # the simulated batches are the live run's (start and size of each)
    live_batches: int = 0
    simulated_batches: int = 0
    requests: int | None = None  # a traffic log's held-out requests (``record.calibrate_log``)
    request_error: float | None = None  # the median of their |priced / server − 1|


class Calibration(BaseModel):
    """One fitted line: ``fixed_ms`` per ubatch, ``per_token_ms`` per token, ``attn_ms`` per token×depth
    and ``attn_small_ms`` per token×depth of a ubatch under 64 tokens (``cost.LineCost``), with
    what it was checked on.

    ``small_ubatches`` counts the fitted ubatches under 64 tokens: with fewer than
    ``MIN_SMALL_UBATCHES`` their extra cost cannot be told from noise and is left at 0.

    ``holdout`` is None when no held-out session was run: the line's error on sessions it
    was not fitted on is then unknown, and the listings say so.
    """

    model_config = ConfigDict(extra="allow")

    fixed_ms: float = Field(ge=0, allow_inf_nan=False)
    per_token_ms: float = Field(ge=0, allow_inf_nan=False)
    attn_ms: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    attn_small_ms: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    small_ubatches: int | None = None
    backend: str = ""
    model: str = ""
    n_ubatch: int | None = None
    threads: int | None = None  # the servers' -t it was measured with (None: their default)
    batches: int | None = None
    fitted_on: str = ""
    q_tile: int = 0  # the attention term's query tile (cost.attn_work); 0 in lines saved before it
    repeat: int = 1  # live runs of each session and build; each batch timed by their median
    spread: float | None = None  # the fitted runs' largest max/min − 1 of one build's prompt time
    holdout: list[HeldOut] | None = None

    def held_out_error(self) -> float | None:
        """The largest |simulated / live − 1| over the held-out runs; None when none was run."""
        return max((abs(h.error) for h in self.holdout), default=None) if self.holdout else None

    def line(self, name: str) -> costmod.LineCost:
        return Terms(self.fixed_ms, self.per_token_ms, self.attn_ms, self.attn_small_ms, self.q_tile).line(
            f"calibration {name}", source=self.model)


class PresetsFile(BaseModel):
    """``presets.json`` in the config folder; other top-level keys are kept as they are."""

    model_config = ConfigDict(extra="allow")

    calibrations: dict[str, Calibration] = Field(default_factory=dict)


def _file() -> Path:
    return load_settings()[0].calibrations_path()


def read_presets() -> PresetsFile:
    f = _file()
    if not f.exists():
        return PresetsFile()
    try:
        return PresetsFile.model_validate_json(f.read_bytes())
    except OSError as exc:
        raise ReplayerError(f"cannot read {f}: {exc.strerror or exc}") from None
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(map(str, err["loc"])) or "the file"
        raise ReplayerError(f"{f} is damaged ({where}: {err['msg']}); fix or remove it") from None


def calibrations() -> dict[str, Calibration]:
    return read_presets().calibrations


def save_calibration(name: str, cal: Calibration) -> Path:
    doc = read_presets()
    doc.calibrations[name] = cal
    f = _file()
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_bytes(orjson.dumps(doc.model_dump(mode="json"), option=orjson.OPT_INDENT_2))
    return f


def calibrated_cost(name: str) -> costmod.CostModel:
    cal = calibrations()
    if name not in cal:
        hint = did_you_mean(name, list(cal))
        raise ReplayerError(f"no calibration {name!r}" + (f"; saved: {', '.join(cal)}" if cal else
                            "; run a live replay with --calibrate first"),
                            hint=f"did you mean {hint}?" if hint else None)
    return cal[name].line(name)


class Terms(NamedTuple):
    """The fitted constants of a ``LineCost`` (ms)."""

    fixed_ms: float
    per_token_ms: float
    attn_ms: float
    attn_small_ms: float
    q_tile: int = 0  # the query tile ``attn_ms`` was fitted per (``cost.attn_work``)

    def line(self, name: str, source: str = "") -> costmod.LineCost:
        return costmod.LineCost(name=name, fixed_ms=self.fixed_ms, per_token_ms=self.per_token_ms,
                                attn_ms=self.attn_ms, attn_small_ms=self.attn_small_ms, source=source,
                                q_tile=self.q_tile)


def q_tile_for(backend: str | None) -> int:
    """The query tile of a backend's flash attention as the line prices it: ggml-cpu's tiles
    (measured here); other backends' kernels tile differently and are priced per row."""
    return costmod.FA_TILE_Q if backend == "cpu" else 0


#: the fewest short ubatches (< ``cost.FA_TILE_Q`` tokens) a fit needs to price them: a prompt
#: usually ends in one, and a single noisy batch priced ~20x per token×depth ruins the line
MIN_SMALL_UBATCHES = 3


def _features(b: ev.BatchDone, n_ubatch: int, q_tile: int = 0) -> tuple[float, float, float, float]:
    """(ubatches, tokens, Σ attn_work, Σ b·(depth + (b+1)/2) over short ubatches) of one batch:
    the fitted terms of ``LineCost``. Counting whole query tiles (``q_tile``) took the mean
    held-out error over 20 fit/predict pairs of 4 session shapes from 9.5 to 8.2 % (per-batch
    medians of 3 quiet runs, ``benchmarks/calib_cv.py``): a line fitted where batches are just
    over 64 tokens no longer overprices a well-batched session's full tiles (docs/benchmarks.md).

    Its ``kv_ms·depth`` (the roofline's per-ubatch KV read) is not fitted: on the CPU runs it came
    out at 38-55 µs per token of depth, ~1000x what reading a tiny model's KV cache costs, and a
    line fitted on a well-batched session then priced a fragmented one +47-60 % (the row-by-row
    attention of short ubatches was what it stood in for; docs/benchmarks.md)."""
    parts = list(costmod.ubatches(b.start, b.n_tokens, n_ubatch))
    return (float(len(parts)), float(b.n_tokens), sum(costmod.attn_work(n, depth, q_tile) for n, depth in parts),
            sum(costmod.attn_work(n, depth) for n, depth in parts if n < costmod.FA_TILE_Q))


def small_ubatches(batches: list[ev.BatchDone], n_ubatch: int) -> int:
    return sum(1 for b in batches for n, _ in costmod.ubatches(b.start, b.n_tokens, n_ubatch)
               if n < costmod.FA_TILE_Q)


def _nnls(a, y):
    """Exact NNLS for a handful of unknowns: the best non-negative least-squares fit on any subset of columns."""
    import numpy as np

    n = a.shape[1]
    best, best_err = np.zeros(n), float(np.sum(y * y))
    for k in range(1, n + 1):
        for cols in itertools.combinations(range(n), k):
            sol, *_ = np.linalg.lstsq(a[:, cols], y, rcond=None)
            if (sol < 0).any():
                continue
            err = float(np.sum((a[:, cols] @ sol - y) ** 2))
            if err < best_err - 1e-12 * best_err:
                best, best_err = np.zeros(n), err
                best[list(cols)] = sol
    return best


def fit_cost(batches: list[ev.BatchDone], n_ubatch: int, match_totals: bool = False, q_tile: int = 0) -> Terms:
    """Non-negative least squares of batch ms = fixed·ubatches + per_token·tokens + attn·Σb·depth
    + attn_small·Σb·depth over ubatches under 64 tokens (only with ``MIN_SMALL_UBATCHES`` of them).

    Pool batches of several runs of one server and model: a run whose batches all have the
    same size cannot tell fixed from per-token cost on its own. Each batch is weighted by
    1/√ms, as if its timing noise grew with its length: the few long batches of a well-batched
    run then do not outweigh the hundreds of short ones of a fragmented run. An earlier fit
    forced each run's total with a heavily weighted row; that matched the fitted runs, but
    on a shared CPU one run slower as a whole (load) then became a per-ubatch cost, and on
    sessions it was not fitted on it did worse than this weighting (held-out error 26.7 vs
    24.5 %, speed-up error 31.1 vs 26.7 %, over 9 live replays of 6 session shapes;
    docs/benchmarks.md). ``match_totals`` keeps those rows for a line that only prices the
    runs it was fitted on (``advise``: the ideal batching of these very runs).
    """
    import numpy as np

    rows = [(_features(b, n_ubatch, q_tile), b.duration_ms, b.run) for b in batches if b.duration_ms > 0]
    if len(rows) < 3:
        raise ReplayerError("need at least three timed batches to calibrate")
    a = np.array([r[0] for r in rows], dtype=float)
    y = np.array([r[1] for r in rows], dtype=float)
    if small_ubatches(batches, n_ubatch) < MIN_SMALL_UBATCHES:
        a[:, 3] = 0.0  # not measured: priced at 0, never guessed from one batch
    runs = sorted({r[2] for r in rows})
    if match_totals and len(runs) > 1:
        weight = 30.0 * len(rows) ** 0.5
        mask = [np.array([r[2] == run for r in rows]) for run in runs]
        a = np.vstack([a, *[weight * a[m].sum(axis=0) for m in mask]])
        y = np.concatenate([y, [weight * y[m].sum() for m in mask]])
        return _solve(a, y, q_tile)
    return _solve(a, y, q_tile, weighted=True)


def _solve(a, y, q_tile: int, weighted: bool = False) -> Terms:
    """NNLS of the rows (each weighted by 1/√ms when ``weighted``), columns scaled first."""
    import numpy as np

    if weighted:
        w = 1.0 / np.sqrt(y)
        a, y = a * w[:, None], y * w
    scale = np.abs(a).max(axis=0)
    scale[scale == 0] = 1.0
    coef = _nnls(a / scale, y) / scale  # the features differ by orders of magnitude
    return Terms(*(float(c) for c in coef), q_tile=q_tile)


def fit_groups(groups: Sequence[tuple[Sequence[ev.BatchDone], float]], n_ubatch: int, q_tile: int = 0) -> Terms:
    """``fit_cost`` where only the total time of a group of batches is known: one row per group
    (its batches' features summed, weighted by 1/√ms as a batch is). A traffic log's request is
    such a group: the server's ``timings.prompt_ms`` covers all the batches of its prompt."""
    import numpy as np

    rows = [(np.sum([_features(b, n_ubatch, q_tile) for b in bs], axis=0), ms) for bs, ms in groups if bs and ms > 0]
    if len(rows) < 3:
        raise ReplayerError("need at least three timed requests to calibrate")
    a = np.array([r[0] for r in rows], dtype=float)
    y = np.array([r[1] for r in rows], dtype=float)
    if small_ubatches([b for bs, _ in groups for b in bs], n_ubatch) < MIN_SMALL_UBATCHES:
        a[:, 3] = 0.0
    return _solve(a, y, q_tile, weighted=True)


def calibrate(batches: list[ev.BatchDone], n_ubatch: int, backend: str, model: Path,
              fitted_on: str = "", threads: int | None = None, repeat: int = 1,
              run_spread: float | None = None) -> tuple[str, Calibration, Path]:
    """Fit both runs' batches together (the cost belongs to the hardware and model, not the
    build) and save the line as ``BACKEND-MODEL``. Its held-out error is not known yet."""
    name = f"{backend}-{model.stem}"
    cal = Calibration(**fit_cost(batches, n_ubatch, q_tile=q_tile_for(backend))._asdict(),
                      small_ubatches=small_ubatches(batches, n_ubatch), backend=backend, model=str(model),
                      n_ubatch=n_ubatch, threads=threads, batches=len(batches), fitted_on=fitted_on,
                      repeat=repeat, spread=run_spread)
    return name, cal, save_calibration(name, cal)


def _cuts(batches: Sequence[ev.BatchDone]) -> list[tuple[int, int]]:
    return [(b.start, b.n_tokens) for b in batches]


def median_batches(runs: Sequence[Sequence[ev.BatchDone]]) -> list[ev.BatchDone]:
    """One build's repeated runs of a prompt as one run, each batch timed by the median of its
    runs: on a shared or throttled machine a whole run is 15-35 % slower or faster than the
    next (docs/benchmarks.md), and one such run fitted or checked alone decides the error.
    The server cuts a prompt the same way every time; repeats that cut it differently are
    refused, never averaged."""
    first = runs[0]
    if any(_cuts(r) != _cuts(first) for r in runs[1:]):
        raise ReplayerError("the repeated live runs cut the prompt into different batches; "
                            "calibrate on one run (--repeat 1)")
    return [replace(b, t_ms=b.t_start_ms + statistics.median(r[i].duration_ms for r in runs))
            for i, b in enumerate(first)]


def spread(times: Sequence[float]) -> float:
    """max / min − 1 of one build's prompt times over repeated runs: the noise a held-out error
    is to be read against."""
    return max(times) / min(times) - 1 if len(times) > 1 and min(times) > 0 else 0.0


def held_out(session: str, lives: Sequence[RunSummary], simulated: RunSummary) -> HeldOut:
    """One build of a held-out session (run live once or ``--repeat`` times): the simulated
    prompt time against the live runs' median, and whether the simulator cut the prompt where
    the server did (a wrong schedule is a different error than a wrong line)."""
    live = lives[0]
    live_ms, sim_ms = statistics.median(r.prompt_ms for r in lives), simulated.prompt_ms
    return HeldOut(session=session, build=live.build, live_ms=round(live_ms, 1), simulated_ms=round(sim_ms, 1),
                   error=round(sim_ms / live_ms - 1, 4) if live_ms else 0.0,
                   batches_match=all(_cuts(simulated.batches) == _cuts(r.batches) for r in lives),
                   live_batches=len(live.batches), simulated_batches=len(simulated.batches))


def held_out_summary(cal: Calibration) -> str:
    """The line every listing of a calibration carries: its error where it was not fitted."""
    err = cal.held_out_error()
    if err is None:
        return "held-out error: not measured (check the line on other sessions with --holdout SESSION …)"
    held = cal.holdout or []
    if all(h.requests is not None for h in held):  # a traffic log's requests (``record.calibrate_log``)
        return f"held-out error: at most {err * 100:.1f} % over {sum(h.requests or 0 for h in held)} requests"
    return f"held-out error: at most {err * 100:.1f} % over {len(held)} runs"


def describe(name: str, cal: Calibration, dest: Path | None = None) -> str:
    """What ``--calibrate`` says: the line, each held-out run and the held-out error."""
    line = (f"calibrated {name}" + (f" on {Path(cal.fitted_on).name}" if cal.fitted_on else "")
            + f": {cal.fixed_ms:.3f} ms per ubatch + {cal.per_token_ms * 1000:.3f} µs per token "
            f"+ {cal.attn_ms * 1e6:.2f} ns per token×depth"
            f" + {cal.attn_small_ms * 1e6:.1f} ns per token×depth under {costmod.FA_TILE_Q} tokens"
            + (f" → {dest}" if dest else ""))
    lines = [line]
    if cal.repeat > 1:
        lines.append(f"  {cal.repeat} live runs of each session and build, each batch timed by their median; "
                     f"the fitted runs' prompt time varied by up to {(cal.spread or 0) * 100:.1f} % from run to run")
    if cal.small_ubatches is not None and cal.small_ubatches < MIN_SMALL_UBATCHES:
        lines.append(f"  the fitted runs have {cal.small_ubatches} ubatches under {costmod.FA_TILE_Q} tokens: "
                     "their extra attention cost is not measured (priced at 0)")
    for h in cal.holdout or []:
        logged = h.requests is not None  # a traffic log's requests: priced by the line against the server's times
        lines.append(f"  held out {Path(h.session).name}" + ("" if logged else f" {h.build}")
                     + f": {'priced' if logged else 'simulated'} {h.simulated_ms / 1000:.2f} s, "
                     f"{'server' if logged else 'live'} {h.live_ms / 1000:.2f} s, error {h.error * 100:+.1f} %"
                     + ("" if h.batches_match else
                        f" (simulated batches differ: {h.simulated_batches} vs {h.live_batches} live)")
                     + ("" if h.request_error is None else
                        f"; per request: median error {h.request_error * 100:.1f} % over {h.requests}"))
    lines.append("  " + held_out_summary(cal))
    return "\n".join(lines)


def listing() -> list[dict[str, Any]]:
    """The saved lines for ``presets --json``."""
    return [{"id": k, **v.model_dump(), "held_out_error": v.held_out_error()} for k, v in calibrations().items()]
