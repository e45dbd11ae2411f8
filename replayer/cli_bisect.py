"""``replayer bisect``: the build (or, with ``--source``, the commit) where a session's prefill changed,
simulated or live."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from replayer.cli_args import out as _out, print_json as _json, progress_printer as _progress_printer
from replayer.core.errors import ReplayerError
from replayer.core.options import config_from as _config


def _build_number(text: str, what: str) -> int:
    from replayer.core.builds.catalog import parse_build

    b = parse_build(text)
    if b.number is None:
        raise ReplayerError(f"{what} needs a build number, not a generation ({text})")
    return b.number


def _bisect_builds(text: str | None, backend: str) -> list[int] | None:
    """``--builds``: None (every index build), ``installed``, or a comma list of numbers."""
    if text is None:
        return None
    if text.strip() == "installed":
        from replayer.core.builds import manager

        return sorted({r.build for r in manager.list_builds() if r.backend == backend})
    return [_build_number(t, "--builds") for t in text.split(",") if t.strip()]


def cmd_bisect(args: argparse.Namespace) -> int:
    from replayer.core import bisect

    if args.source:
        from replayer.cli_source import bisect_commits

        return bisect_commits(args)
    m = bisect.metric(args.metric)
    good, bad = _build_number(args.good, "--good"), _build_number(args.bad, "--bad")
    thr = bisect.Threshold(band=args.band, max_samples=args.max_samples).validate()
    cfg = _config(args)
    say = (lambda line: print(line, file=sys.stderr, flush=True)) if args.json else _out

    def on_step(step) -> None:
        say(bisect.step_line(step, m))

    if args.engine == "live":
        progress: dict[int, Any] = {}

        def on_progress(n: int, stage: str, frac: float) -> None:
            progress.setdefault(n, _progress_printer(f"b{n}"))(stage, frac)

        backend = cfg.backend or "cpu"
        res = bisect.live(args.session, cfg, good, bad, m, Path(args.model), backend=backend, thr=thr,
                          candidates=_bisect_builds(args.builds, backend), ctx_size=args.ctx_size,
                          timeout=args.timeout, resume=not args.fresh, on_step=on_step, on_progress=on_progress)
    else:
        res = bisect.simulated(args.session, cfg, good, bad, m, thr, on_step=None if args.json else on_step,
                               candidates=_bisect_builds(args.builds, cfg.backend or "cpu"))
    if args.json:
        _json(res.to_dict())
        return 0 if res.found else 1
    if res.found is not None and good in res.samples and bad in res.samples:
        _out("threshold: " + res.threshold.describe(*res.references()))
    _out("\n".join(res.summary_lines()))
    for bd in res.boundaries:
        names = ", ".join(f"PR #{c['pr']}" if c["pr"] else c["title"] for c in bd["changes"]) or "no known change"
        _out(f"boundary b{bd['last']} → b{bd['first']} ({' → '.join(bd['generations'])}): "
             f"{bd['batches'][0]:.0f} → {bd['batches'][1]:.0f} batches, "
             f"{bd['prompt_ms'][0] / 1000:,.1f} → {bd['prompt_ms'][1] / 1000:,.1f} s  [{names}]")
    return 0 if res.found else 1

