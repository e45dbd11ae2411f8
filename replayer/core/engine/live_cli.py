"""``replayer replay --engine live``: builds A and B on real servers, same outputs as simulated.

Runs are sequential by default (one GPU); ``--parallel-runs`` runs them at once. A failed
run becomes ``RunFailed`` and the other run goes on. ``--calibrate`` fits the cost line
(fixed ms per ubatch + ms per token) from the live batch times and saves it as a preset.
"""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path


from replayer.core.builds.catalog import parse_build
from replayer.core.compare import Comparison, compare
from replayer.core.engine import events as ev
from replayer.core.engine.live import LiveResult, installed_run_events, stop_all
from replayer.core.errors import ReplayerError
from replayer.core.hardware.cost import LineCost, ubatches
from replayer.core.replay import save_calibration


def _features(b: ev.BatchDone, n_ubatch: int) -> tuple[float, float, float, float]:
    """(ubatches, tokens, Σ b·(depth + (b+1)/2), Σ depth) of one batch: the terms of ``LineCost``."""
    parts = list(ubatches(b.start, b.n_tokens, n_ubatch))
    return (float(len(parts)), float(b.n_tokens), sum(n * (depth + (n + 1) / 2) for n, depth in parts),
            float(sum(depth for _, depth in parts)))


def fit_cost(batches: list[ev.BatchDone], n_ubatch: int, name: str = "fit") -> LineCost:
    """Non-negative least squares of batch ms = fixed·ubatches + per_token·tokens + attn·Σb·depth + kv·Σdepth.

    Pool batches of several runs of one server and model: a run whose batches all have the
    same size cannot tell fixed from per-token cost on its own. Each run's total also enters
    as a heavily weighted row: what a calibration must get right is every run's prompt time
    (and so the speed-up). Fitted on batches alone, the few long batches of a well-batched
    run outweigh the hundreds of short ones of a fragmented run, and on a CPU, where big
    batches are more efficient per token than the line allows, the fragmented run came out
    7-18 % short. The per-ubatch KV read (``kv·depth``) is what a fragmented run pays more of
    at depth; without it a line fitted on one session missed another by 50 % (docs/benchmarks.md).
    """
    import itertools

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
    n = a.shape[1]
    scale = np.abs(a).max(axis=0)
    scale[scale == 0] = 1.0
    a = a / scale  # the features differ by orders of magnitude
    best, best_err = np.zeros(n), float(np.sum(y * y))
    for k in range(1, n + 1):  # exact NNLS for four unknowns: the best non-negative fit on any subset
        for cols in itertools.combinations(range(n), k):
            sol, *_ = np.linalg.lstsq(a[:, cols], y, rcond=None)
            if (sol < 0).any():
                continue
            err = float(np.sum((a[:, cols] @ sol - y) ** 2))
            if err < best_err - 1e-12 * best_err:
                best, best_err = np.zeros(n), err
                best[list(cols)] = sol
    fixed, per, attn, kv = (float(x) for x in best / scale)
    return LineCost(name=name, fixed_ms=fixed, per_token_ms=per, attn_ms=attn, kv_ms=kv)


def _live_runs(args: argparse.Namespace, cfg, body: dict, model: Path, backend: str, knobs,
               jsonl: bool = False) -> dict[str, list[ev.Event]]:
    """Runs A and B of one request on real servers (spawned, or attached with --server)."""
    attached = {"A": args.server, "B": getattr(args, "server_b", None)}
    runs: dict[str, list[ev.Event]] = {"A": [], "B": []}
    results = {"A": LiveResult(), "B": LiveResult()}
    lock = threading.Lock()

    def emit(run: str, evs) -> None:
        for e in evs:
            runs[run].append(e)
            if jsonl:
                with lock:
                    sys.stdout.buffer.write(ev.to_json(e) + b"\n")
                    sys.stdout.flush()

    def one(run: str, spec: str) -> None:
        if attached[run]:
            from replayer.core.engine.live import attach_events

            build = parse_build(spec)
            evs = attach_events(run, build, knobs, attached[run], body,
                                log_file=Path(args.server_log) if args.server_log and run == "A" else None,
                                label=f"{run}: {build.label}", result=results[run], timeout=args.timeout,
                                settings={"n_batch": knobs.n_batch, "n_ubatch": knobs.n_ubatch})
            emit(run, evs)
            return
        emit(run, installed_run_events(run, spec, backend, knobs, model, body, ctx_size=args.ctx_size,
                                       request_timeout=args.timeout, result=results[run],
                                       settings={"backend": backend, "n_batch": knobs.n_batch,
                                                 "n_ubatch": knobs.n_ubatch}))

    try:
        if args.parallel_runs:
            threads = [threading.Thread(target=one, args=(r, spec)) for r, spec in (("A", cfg.a), ("B", cfg.b))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        else:
            one("A", cfg.a)
            one("B", cfg.b)
    except KeyboardInterrupt:
        stop_all()
        raise
    return runs


def held_out(line, cfg, live: Comparison, session: str, model: Path) -> list[dict]:
    """The calibrated line's error on a session it was not fitted on: the simulated prompt time
    (the GGUF's own layout, header memory kind, exact schedule) against the live run's."""
    import dataclasses

    from replayer.core.engine.simulate import simulate
    from replayer.core.replay import prepare, run_spec

    sim_cfg = dataclasses.replace(cfg, engine="simulated", model=str(model), calibration=None)
    prep = prepare(session, sim_cfg)
    out = []
    for run, build, lv in (("A", parse_build(cfg.a), live.a), ("B", parse_build(cfg.b), live.b)):
        if lv.failed or lv.finished is None:
            continue
        evs = list(simulate(run_spec(run, build, sim_cfg), prep.layouts[run].prompt_spans(), line))
        sim_ms = evs[-1].prompt_ms
        sim_batches = [(b.start, b.n_tokens) for b in evs if isinstance(b, ev.BatchDone)]
        live_ms = lv.finished.prompt_ms
        out.append({"session": str(session), "build": build.label, "live_ms": round(live_ms, 1),
                    "simulated_ms": round(sim_ms, 1), "error": round(sim_ms / live_ms - 1, 4),
                    "batches_match": sim_batches == [(b.start, b.n_tokens) for b in lv.batches]})
    return out


def replay_live(args: argparse.Namespace, cfg) -> int:
    from replayer.core import export
    from replayer.core.session import load_session
    from replayer.core.session.request import request_from_files

    s = load_session(args.session, cfg.format)
    req = request_from_files(s, cfg.system_prompt, cfg.tools)
    model = Path(args.model).expanduser()
    attached = {"A": args.server, "B": getattr(args, "server_b", None)}
    if not all(attached.values()) and not model.suffix == ".gguf" and not model.exists():
        raise ReplayerError(f"--model must be a GGUF file for live replays, got {args.model!r}")
    holdout = list(getattr(args, "holdout", None) or [])
    if holdout and not args.calibrate:
        raise ReplayerError("--holdout checks a calibration: give it with --calibrate")
    if holdout and model.suffix != ".gguf":
        raise ReplayerError("--holdout simulates the held-out sessions with the model's GGUF: give --model PATH.gguf")
    held_reqs = [request_from_files(load_session(h, cfg.format), cfg.system_prompt, cfg.tools) for h in holdout]
    backend = cfg.backend or "cpu"
    knobs = cfg.knobs() if _resolvable(cfg.model) else _knobs(cfg)
    jsonl = bool(args.jsonl)
    runs = _live_runs(args, cfg, req.body, model, backend, knobs, jsonl=jsonl)
    if jsonl:
        return 0 if not any(isinstance(e, ev.RunFailed) for r in runs.values() for e in r) else 1
    cmp = compare(runs["A"] + runs["B"])
    if args.calibrate:
        # the cost belongs to the hardware and model, not the build: fit both runs together
        timed = [b for r in (cmp.a, cmp.b) if not r.failed for b in r.batches]
        name = f"{backend}-{model.stem}"
        line = fit_cost(timed, knobs.n_ubatch_eff, name=f"calibration {name}")
        checks = []
        for h, hreq in zip(holdout, held_reqs):  # sequential, after the fit: one server at a time
            hruns = _live_runs(args, cfg, hreq.body, model, backend, knobs)
            checks += held_out(line, cfg, compare(hruns["A"] + hruns["B"]), h, model)
        f = save_calibration(name, line.fixed_ms, line.per_token_ms,
                             {"attn_ms": line.attn_ms, "kv_ms": line.kv_ms, "backend": backend, "model": str(model),
                                                "n_ubatch": knobs.n_ubatch_eff, "batches": len(timed),
                                                "fitted_on": str(s.path), "holdout": checks})
        print(f"calibrated {name} on {Path(s.path).name}: {line.fixed_ms:.3f} ms per ubatch "
              f"+ {line.per_token_ms * 1000:.3f} µs per token + {line.attn_ms * 1e6:.4f} ns per token×depth "
              f"+ {line.kv_ms * 1e6:.2f} ns per depth → {f}", file=sys.stderr)
        for c in checks:
            print(f"  held out {Path(c['session']).name} {c['build']}: simulated {c['simulated_ms'] / 1000:.2f} s, "
                  f"live {c['live_ms'] / 1000:.2f} s, error {c['error'] * 100:+.1f} %"
                  + ("" if c["batches_match"] else " (simulated batches differ from the live run's)"), file=sys.stderr)
        if checks:
            worst = max(abs(c["error"]) for c in checks)
            print(f"  held-out error: at most {worst * 100:.1f} % over {len(checks)} runs", file=sys.stderr)
        else:
            print("  held-out error: not measured (check the line on other sessions with --holdout SESSION …)",
                  file=sys.stderr)
    meta = {"session": s.path, "format": s.format}
    if args.json:
        sys.stdout.buffer.write(export.to_json(cmp, {"session": meta}, redacted=False) + b"\n")
    elif args.markdown:
        print(export.to_markdown(cmp, meta))
    else:
        print(export.to_text(cmp))
    return 1 if (cmp.a.failed or cmp.b.failed) else 0


def _resolvable(model: str) -> bool:
    from replayer.core.hardware import gguf_model

    return model in _preset_ids() or gguf_model.is_gguf_path(model) and Path(model).expanduser().is_file()


def _preset_ids() -> set[str]:
    from replayer.core.hardware import presets

    return set(presets.MODELS)


def _knobs(cfg):
    from replayer.core.engine.schedule import Knobs

    # the live model's memory kind is whatever the server finds; the knobs only set flags
    return Knobs(n_batch=cfg.n_batch, n_ubatch=cfg.n_ubatch, n_ctx_checkpoints=cfg.ctx_checkpoints,
                 checkpoint_min_step=cfg.checkpoint_min_step, memory=cfg.memory or "recurrent").validate()
