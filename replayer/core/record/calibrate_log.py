"""``replay LOG --calibrate``: a cost line fitted on the timings the user's own server put in a
traffic log (``replayer record``), with no second run.

Every answer of llama-server carries ``timings``: ``cache_n`` tokens reused, ``prompt_n`` processed
in ``prompt_ms``. The server processed those ``prompt_n`` tokens from depth ``cache_n`` in batches
of ``-b`` tokens, each decoded in ubatches of ``-ub`` (``--batch-size`` / ``--ubatch-size``: the
user's server's, default llama-server's 2048 / 512), so one request is one row of the fit: its
ubatches' features summed against its ``prompt_ms`` (``calibration.fit_groups``). Only requests
whose answer had timings count (Anthropic and Responses answers carry ``usage`` only).

The line is checked where it was not fitted: on the log's last third of timed requests (the
requests come in order, so that part is the deepest: the attention term is tested where it was
not fitted), or, with ``--holdout LOG …``, fitted on the whole log and checked on every timed
request of the other logs. The error is the held-out part's summed prompt time priced by the
line against the server's, and the median of each request's own error.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from replayer.core.calibration import Calibration, HeldOut, describe, fit_groups, q_tile_for, save_calibration, \
    small_ubatches
from replayer.core.engine import events as ev
from replayer.core.errors import ReplayerError
from replayer.core.hardware import cost as costmod
from replayer.core.hardware import presets
from replayer.core.prepare import ReplayConfig
from replayer.core.session.reader import JsonlStats, check_readable_file, iter_jsonl
from replayer.core.session.formats.recorded_traffic import detect

#: the share of a log's timed requests the line is fitted on when no other log is held out
FIT_SHARE = 2 / 3


@dataclass(frozen=True)
class TimedRequest:
    """One request the server timed: ``prompt_n`` tokens from depth ``cache_n`` in ``prompt_ms``."""

    seq: int
    endpoint: str
    cache_n: int
    prompt_n: int
    prompt_ms: float
    model: str | None = None  # the body's "model" (what the client named)


def _count(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _timed(rec: dict[str, Any]) -> TimedRequest | None:
    t = rec.get("timings")
    if rec.get("status") != 200 or not isinstance(t, dict):
        return None
    cache_n, prompt_n, ms = _count(t.get("cache_n")), _count(t.get("prompt_n")), t.get("prompt_ms")
    if cache_n is None or not prompt_n or not isinstance(ms, (int, float)) or isinstance(ms, bool) \
            or not 0 < ms < 1e9:
        return None
    body = rec.get("body")
    model = body.get("model") if isinstance(body, dict) and isinstance(body.get("model"), str) else None
    return TimedRequest(_count(rec.get("seq")) or 0, str(rec.get("endpoint")), cache_n, prompt_n, float(ms), model)


def timed_requests(path: Path) -> list[TimedRequest]:
    """The log's requests that the server timed, in the order logged. A file that is not a
    traffic log, or one without a timed request, is one clear error."""
    check_readable_file(path)
    out: list[TimedRequest] = []
    lines = 0
    for rec in iter_jsonl(path, JsonlStats()):
        if not detect([rec]):
            continue
        lines += 1
        t = _timed(rec)
        if t is not None:
            out.append(t)
    if not lines:
        raise ReplayerError(f"{path} is not a traffic log (written by replayer record): --calibrate fits on "
                            "the server's timings recorded there")
    if not out:
        raise ReplayerError(f"{path}: none of its {lines} requests has the server's timings (prompt_n, prompt_ms); "
                            "answers of /v1/messages and /v1/responses carry none")
    return out


def batches_of(r: TimedRequest, n_batch: int, n_ubatch: int) -> list[ev.BatchDone]:
    """The batches the server decoded the request's prompt in: ``n_batch`` tokens each from ``cache_n``."""
    out, pos, end = [], r.cache_n, r.cache_n + r.prompt_n
    while pos < end:
        n = min(n_batch, end - pos)
        out.append(ev.BatchDone(f"seq{r.seq}", len(out), pos, n, -(-n // n_ubatch), "recorded", 0.0, 0.0))
        pos += n
    return out


def priced_ms(line: costmod.LineCost, r: TimedRequest, n_batch: int, n_ubatch: int) -> float:
    return sum(line.ubatch_ms(b, depth) for bd in batches_of(r, n_batch, n_ubatch)
               for b, depth in costmod.ubatches(bd.start, bd.n_tokens, n_ubatch))


def check(line: costmod.LineCost, where: str, reqs: Sequence[TimedRequest], n_batch: int, n_ubatch: int) -> HeldOut:
    """The line on requests it was not fitted on, against the server's prompt time."""
    priced = [priced_ms(line, r, n_batch, n_ubatch) for r in reqs]
    live, sim = sum(r.prompt_ms for r in reqs), sum(priced)
    per = [p / r.prompt_ms - 1 for p, r in zip(priced, reqs)]
    return HeldOut(session=where, build="recorded", live_ms=round(live, 1), simulated_ms=round(sim, 1),
                   error=round(sim / live - 1, 4), batches_match=True, live_batches=len(reqs),
                   simulated_batches=len(reqs), requests=len(reqs),
                   request_error=round(statistics.median(abs(e) for e in per), 4))


def _name(config: ReplayConfig, reqs: Sequence[TimedRequest]) -> tuple[str, str, str]:
    """(id, backend, model) of the line: ``BACKEND-MODEL`` as a live calibration names it; the model
    is ``--model``'s GGUF when given, else what the client named in its bodies."""
    backend = config.backend or presets.gpu(config.gpu).backend
    if config.model.lower().endswith(".gguf"):
        model = str(Path(config.model).expanduser())
    else:
        named = Counter(r.model for r in reqs if r.model).most_common(1)
        model = named[0][0] if named else "traffic"
    return f"{backend}-{Path(model).stem or 'traffic'}", backend, model


def _split(path: Path, reqs: list[TimedRequest], holdout: Sequence[str]) -> tuple[list, list[tuple[str, list]]]:
    """(fitted requests, [(where, held-out requests)]): the log's first part and its last third,
    or the whole log and every ``--holdout`` log."""
    if holdout:
        return reqs, [(str(Path(h).expanduser()), timed_requests(Path(h).expanduser())) for h in holdout]
    n_fit = max(3, round(len(reqs) * FIT_SHARE))
    if n_fit >= len(reqs):
        return reqs, []
    return reqs[:n_fit], [(f"{path} requests {n_fit + 1}-{len(reqs)} (of {len(reqs)} timed)", reqs[n_fit:])]


def calibrate_log(path: Path, config: ReplayConfig, save: bool = True) -> tuple[str, Calibration, str]:
    """Fit, check and save the line; returns its id, the calibration and what to say about it."""
    reqs = timed_requests(path)
    fit, held = _split(path, reqs, config.holdout)
    if len(fit) < 3:
        raise ReplayerError(f"{path}: {len(fit)} timed request{'s' if len(fit) != 1 else ''}; "
                            "need at least three to calibrate")
    knobs = config.knobs()
    n_batch, n_ubatch = knobs.n_batch_eff, knobs.n_ubatch_eff
    name, backend, model = _name(config, reqs)
    groups = [(batches_of(r, n_batch, n_ubatch), r.prompt_ms) for r in fit]
    terms = fit_groups(groups, n_ubatch, q_tile=q_tile_for(backend))
    cal = Calibration(**terms._asdict(), small_ubatches=small_ubatches([b for bs, _ in groups for b in bs], n_ubatch),
                      backend=backend, model=model, n_ubatch=n_ubatch, batches=sum(len(bs) for bs, _ in groups),
                      fitted_on=str(path), source="traffic log", requests=len(fit), n_batch=n_batch)
    line = terms.line(f"calibration {name}", source=model)
    if held:
        cal.holdout = [check(line, where, rs, n_batch, n_ubatch) for where, rs in held]
    note = f"  fitted on {len(fit)} requests the server timed (of {len(reqs)}), -b {n_batch} -ub {n_ubatch}"
    if not held:
        note += "; too few to hold any out"
    dest = save_calibration(name, cal) if save else None
    lines = describe(name, cal, dest).split("\n")
    return name, cal, "\n".join([lines[0], note, *lines[1:]])
