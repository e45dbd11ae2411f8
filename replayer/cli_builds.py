"""``replayer builds``, ``models`` and ``presets``: the installed llama-server builds, tiny GGUF
models, and the cost model's tables (with saved calibrations and themes)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from replayer.cli_args import out as _out, print_json as _json, progress_printer as _progress_printer
from replayer.core.errors import ReplayerError


def cmd_presets(args: argparse.Namespace) -> int:
    from replayer.core.hardware import presets

    from replayer.core import calibration

    from replayer.ui import themes

    data = presets.listing()
    data["calibrations"] = calibration.listing()
    data["themes"] = themes.listing()
    if args.json:
        _json(data)
        return 0
    lines = ["backends: " + ", ".join(b["id"] for b in data["backends"]), "", "GPUs:"]
    lines += [f"  {g['id']:<12} {g['name']}  [{', '.join(g['backends'])}]" for g in data["gpus"]]
    lines += ["", "models:"]
    lines += [f"  {m['id']:<22} {m['name']}  ({m['memory']}{', checkpoints' if m['needs_checkpoints'] else ''})"
              for m in data["models"]]
    if data["calibrations"]:
        lines += ["", "calibrations (replay --calibration ID):"]
        lines += [f"  {c['id']:<30} {c['fixed_ms']:.3f} ms/ubatch + {c['per_token_ms'] * 1000:.3f} µs/token, "
                  + (f"held-out error {c['held_out_error'] * 100:.1f} %" if c["held_out_error"] is not None
                     else "held-out error not measured") for c in data["calibrations"]]
    th = data["themes"]
    lines += ["", f"themes (settings.json \"theme\"; your own in {th['user_dir']}):"]
    lines += [f"  {t['name']:<22} {t['source']}" for t in th["themes"]]
    lines += [f"  skipped: {e}" for e in th["errors"]]
    _out("\n".join(lines))
    return 0


def cmd_builds(args: argparse.Namespace) -> int:
    from replayer.cli_source import build_name, install_source
    from replayer.core.builds import manager

    if args.builds_cmd == "list":
        recs = manager.list_builds()
        for line in manager.damaged_records():
            print(f"note: {line}", file=sys.stderr)
        if args.json:
            _json([r.model_dump() for r in recs])
        elif not recs:
            _out("no builds installed (replayer builds install 10001 --backend cpu)")
        else:
            _out("\n".join([f"{'build':<16} {'backend':<7} {'source':<6} binary"] +
                            [f"{build_name(r):<16} {r.backend:<7} {r.source:<6} {r.binary}" for r in recs]))
        return 0
    if args.builds_cmd == "install" and (args.source or args.git or args.patch):
        return install_source(args, manager)
    if args.builds_cmd == "install":
        from replayer.core.builds.catalog import parse_build

        if not args.build:
            raise ReplayerError("builds install needs a build number, --source DIR or --git URL --ref REF")
        for number in args.build:
            b = parse_build(number)
            if b.number is None:
                raise ReplayerError(f"install needs a build number, not a generation ({number})")
            rec = manager.install(b.number, args.backend, _progress_printer(f"b{b.number}"))
            _out(f"b{rec.build} {rec.backend}: {rec.binary}")
        return 0
    if args.builds_cmd == "add":
        rec = manager.add_local(Path(args.path))
        _out(f"added b{rec.build} ({rec.backend}): {rec.binary}")
        return 0
    if args.builds_cmd == "remove":
        for rec in manager.remove(args.selector):
            _out(f"removed b{rec.build} {rec.backend} ({rec.entry})")
        return 0
    raise ReplayerError("usage: replayer builds install|list|add|remove")


def cmd_models(args: argparse.Namespace) -> int:
    if getattr(args, "models_cmd", None) is None:
        raise ReplayerError("usage: replayer models make-tiny --arch llama|gemma2|lfm2 OUT.gguf")
    from replayer.core.tiny_models import make_tiny

    path = make_tiny(args.arch, Path(args.out), vocab=args.vocab)
    _out(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB, arch {args.arch})")
    return 0

