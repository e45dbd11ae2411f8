"""``replayer record``: the recording proxy's sub-command (registered in cli_parser.py in one line)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def cmd_record(args: argparse.Namespace) -> int:
    from replayer.core.record.run import record

    def ready(url: str, path: Path) -> None:
        print(f"replayer record: {url} -> {args.upstream}, logging to {path} (Ctrl-C stops)", file=sys.stderr,
              flush=True)

    n = record(args.upstream, args.listen, Path(args.out).expanduser() if args.out else None, on_ready=ready)
    print(f"replayer record: {n} line(s) logged", file=sys.stderr)
    return 0


def add_parser(sub: Any) -> None:
    """Arguments of ``replayer record``."""
    p = sub.add_parser("record", help="a proxy between an agent and llama-server that logs every request as sent "
                                      "(a traffic log: replay LOG --mode session)")
    add_proxy_options(p)
    p.set_defaults(func=cmd_record)


def add_proxy_options(p: Any) -> None:
    """The proxy's own options, shared by ``record`` and ``watch``: where to forward, where to
    listen, where the traffic log goes."""
    from replayer.core.record.run import DEFAULT_LISTEN

    p.add_argument("--upstream", required=True, metavar="URL",
                   help="the llama-server (or router) to forward to, e.g. http://127.0.0.1:8080")
    p.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT",
                   help="where the agent connects (127.0.0.1 unless a host is given)")
    p.add_argument("--out", metavar="FILE", help="the traffic log (JSONL, appended; default "
                                                 "replayer-traffic-DATE-TIME.jsonl here)")
