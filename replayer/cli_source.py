"""The CLI of builds from source: ``builds install --source/--git/--patch`` and ``bisect --source``.

Kept beside ``cli_parser.py`` (which registers the options) so that each CLI module stays one
screenful per command; the work is in ``core/builds/source.py``, ``manager.install_source``
and ``core/bisect_commits.py``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from replayer.cli_args import out as _out, print_json as _json, progress_printer as _progress_printer
from replayer.core.options import config_from as _config
from replayer.core.errors import ReplayerError


def build_name(rec) -> str:
    return rec.label if rec.source == "source" and rec.label else f"b{rec.build}"


def install_source(args: argparse.Namespace, manager) -> int:
    """``builds install --source DIR | --git URL --ref REF | N --patch FILE…``."""
    from replayer.core.builds.source import spec_from

    spec = spec_from(tree=args.source, url=args.git, ref=args.ref, release=args.build, patches=args.patch)
    rec = manager.install_source(spec, args.backend, _progress_printer(spec.describe()))
    rules = rec.generation or "no known generation: live runs only"
    _out(f"{rec.label} {rec.backend} (rules: {rules}): {rec.binary}")
    return 0



def bisect_commits(args: argparse.Namespace) -> int:
    """``bisect --source DIR --good C1 --bad C2``: by commit, live, each step built from source."""
    from replayer.core import bisect, bisect_commits

    if args.engine != "live":
        raise ReplayerError("bisect --source builds and runs each commit: add --engine live (and --model GGUF)")
    if args.builds:
        raise ReplayerError("--builds lists release builds; with --source the candidates are the commits")
    m = bisect.metric(args.metric)
    thr = bisect.Threshold(band=args.band, max_samples=args.max_samples).validate()
    say = (lambda line: print(line, file=sys.stderr, flush=True)) if args.json else _out
    progress: dict[int, Any] = {}

    def on_progress(i: int, stage: str, frac: float) -> None:
        progress.setdefault(i, _progress_printer(f"commit {i}"))(stage, frac)

    def on_step(step) -> None:
        say(f"commit {step.build:<4} {m.name} {step.value:,.4g} {m.unit}  → {step.decision}  ({step.why})")

    cfg = _config(args)
    res = bisect_commits.live(args.session, cfg, args.source, args.good, args.bad, m, Path(args.model),
                              backend=cfg.backend or "cpu", thr=thr, ctx_size=args.ctx_size, timeout=args.timeout,
                              on_step=on_step, on_progress=on_progress)
    if args.json:
        _json(res.to_dict())
    else:
        _out("\n".join(res.summary_lines()))
    return 0 if res.result.found else 1
