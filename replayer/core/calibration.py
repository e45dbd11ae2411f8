"""Cost lines fitted from live runs (``replay --engine live --calibrate``) and the file that keeps them.

The presets file is the user's, and so untrusted: it is read through pydantic models and
a damaged or mistyped file is one clear error, never a traceback or a half-read line.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from replayer.core.engine import events as ev
from replayer.core.errors import ReplayerError, did_you_mean
from replayer.core.hardware import cost as costmod
from replayer.core.settings import load_settings


class Calibration(BaseModel):
    """One fitted line: ``fixed_ms`` per ubatch, ``per_token_ms`` per token, ``attn_ms`` per token×depth."""

    model_config = ConfigDict(extra="allow")

    fixed_ms: float = Field(ge=0, allow_inf_nan=False)
    per_token_ms: float = Field(ge=0, allow_inf_nan=False)
    attn_ms: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    backend: str = ""
    model: str = ""
    n_ubatch: int | None = None
    batches: int | None = None


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
    c = cal[name]
    return costmod.LineCost(name=f"calibration {name}", fixed_ms=c.fixed_ms, per_token_ms=c.per_token_ms,
                            attn_ms=c.attn_ms, source=c.model)


def _features(b: ev.BatchDone, n_ubatch: int) -> tuple[float, float, float]:
    """(ubatches, tokens, Σ b·(depth + (b+1)/2)) of one batch: the terms of ``LineCost``."""
    parts = list(costmod.ubatches(b.start, b.n_tokens, n_ubatch))
    return float(len(parts)), float(b.n_tokens), sum(n * (depth + (n + 1) / 2) for n, depth in parts)


def _nnls3(a, y):
    """Exact NNLS for three unknowns: the best non-negative least-squares fit on any subset of columns."""
    import numpy as np

    best, best_err = np.zeros(3), float(np.sum(y * y))
    for k in (1, 2, 3):
        for cols in itertools.combinations(range(3), k):
            sol, *_ = np.linalg.lstsq(a[:, cols], y, rcond=None)
            if (sol < 0).any():
                continue
            err = float(np.sum((a[:, cols] @ sol - y) ** 2))
            if err < best_err - 1e-12 * best_err:
                best, best_err = np.zeros(3), err
                best[list(cols)] = sol
    return best


def fit_cost(batches: list[ev.BatchDone], n_ubatch: int) -> tuple[float, float, float]:
    """Non-negative least squares of batch ms = fixed·ubatches + per_token·tokens + attn·Σb·depth.

    Pool batches of several runs of one server and model: a run whose batches all have the
    same size cannot tell fixed from per-token cost on its own. Each run's total also enters
    as a heavily weighted row: what a calibration must get right is every run's prompt time
    (and so the speed-up). Fitted on batches alone, the few long batches of a well-batched
    run outweigh the hundreds of short ones of a fragmented run, and on a CPU, where big
    batches are more efficient per token than the line allows, the fragmented run came out
    7-18 % short.
    """
    import numpy as np

    rows = [(_features(b, n_ubatch), b.duration_ms, b.run) for b in batches if b.duration_ms > 0]
    if len(rows) < 3:
        raise ReplayerError("need at least three timed batches to calibrate")
    a = np.array([r[0] for r in rows], dtype=float)
    y = np.array([r[1] for r in rows], dtype=float)
    runs = sorted({r[2] for r in rows})
    if len(runs) > 1:
        weight = 30.0 * len(rows) ** 0.5
        mask = [np.array([r[2] == run for r in rows]) for run in runs]
        a = np.vstack([a, *[weight * a[m].sum(axis=0) for m in mask]])
        y = np.concatenate([y, [weight * y[m].sum() for m in mask]])
    scale = np.abs(a).max(axis=0)
    scale[scale == 0] = 1.0
    coef = _nnls3(a / scale, y) / scale  # the three features differ by orders of magnitude
    return float(coef[0]), float(coef[1]), float(coef[2])


def calibrate(batches: list[ev.BatchDone], n_ubatch: int, backend: str, model: Path) -> tuple[str, Calibration, Path]:
    """Fit both runs' batches together (the cost belongs to the hardware and model, not the
    build) and save the line as ``BACKEND-MODEL``."""
    fixed, per, attn = fit_cost(batches, n_ubatch)
    name = f"{backend}-{model.stem}"
    cal = Calibration(fixed_ms=fixed, per_token_ms=per, attn_ms=attn, backend=backend, model=str(model),
                      n_ubatch=n_ubatch, batches=len(batches))
    return name, cal, save_calibration(name, cal)


def describe(name: str, cal: Calibration, dest: Path | None = None) -> str:
    line = (f"calibrated {name}: {cal.fixed_ms:.3f} ms per ubatch + {cal.per_token_ms * 1000:.3f} µs per token "
            f"+ {cal.attn_ms * 1e6:.4f} ns per token×depth")
    return line + (f" → {dest}" if dest else "")


def listing() -> list[dict[str, Any]]:
    """The saved lines for ``presets --json``."""
    return [{"id": k, **v.model_dump()} for k, v in calibrations().items()]
