"""``replayer layout`` and ``replayer schedule``: one prompt in token space, and the batches
and checkpoints one build makes of it, without a replay."""

from __future__ import annotations

import argparse
import sys

from replayer.cli_args import out as _out, print_json as _json
from replayer.core.errors import ReplayerError


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

