"""``replayer advise``: the builds and flags that would make a session faster, ranked."""

from __future__ import annotations

import argparse

from replayer.cli_args import out as _out, print_json as _json
from replayer.core.options import config_from as _config


def cmd_advise(args: argparse.Namespace) -> int:
    from replayer.core import advise

    settings = advise.Settings(_config(args), swa_full=args.swa_full, cache_ram=args.cache_ram,
                               n_parallel=args.parallel, kv_unified=args.kv_unified, ctx_size=args.ctx_size)
    if args.mode == "session":
        from replayer.core.advise_session import advise_session

        adv = advise_session(args.session, settings.with_(b=args.a), server_args=args.server_args)
    else:
        if args.server_args is not None:
            from replayer.core.errors import ReplayerError

            raise ReplayerError("advise --server-args goes with --mode session")
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
    if adv.server is not None:
        lines += _server_lines(adv.server)
    _out("\n".join(lines))
    return 0



def _server_lines(srv: dict) -> list[str]:
    """The user's own server: today's time through it, and each flag that keeps a lost state."""
    out = ["", f"your server ({srv['server_args'] or 'its defaults'}): {srv['prompt_ms'] / 1000:,.1f} s, "
               f"{srv['lost']:,} shared tokens lost between requests"]
    if not srv["fixes"]:
        out.append("  no flag would have kept a lost state")
    for r in srv["fixes"]:
        out.append(f"  {r['flag']}: {r['prompt_ms'] / 1000:,.1f} s, saves {r['saving_ms'] / 1000:,.1f} s "
                   f"({r['saving_pct']}%, {r['requests']} request(s) lost their state without it)")
        out.append(f"    {r['command']}")
    return out
