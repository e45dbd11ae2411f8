"""``replayer watch``: the app on a recording proxy (kept out of cli.py, registered there in one line)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any


def cmd_watch(args: argparse.Namespace) -> int:
    """Bind first (a bad upstream, listen address or build is one line, before any screen), then
    the app — or, with ``--lines``, one line a request on stdout."""
    from replayer.core.options import config_from
    from replayer.core.record.watch import Watch

    config = config_from(args)
    server_args = None
    if args.server_args is not None:
        from replayer.core.server.session import check_server_args

        server_args = check_server_args(args.server_args, config)
    server_log = Path(args.server_log).expanduser() if args.server_log else None
    w = Watch(args.upstream, config, args.listen, Path(args.out).expanduser() if args.out else None,
              server_args=server_args, server_log=server_log)
    url = w.start()
    try:
        if args.lines:
            return _lines(w, url)
        from replayer.ui.screens.watch import WatchSpec, run_watch_app

        return run_watch_app(WatchSpec(args.upstream, config, args.listen, w.path, watch=w, server_args=server_args,
                                       server_log=server_log))
    finally:
        w.stop()


def _lines(w, url: str) -> int:
    """Headless: one line a request on stdout, the totals on stderr at the end (Ctrl-C stops)."""
    from replayer.core.record.watch_text import header_line, row_line, totals_line

    print(f"replayer watch: {url} -> {w.upstream_url}, logging to {w.path}, predicted by {w.build_label} "
          "(Ctrl-C stops)", file=sys.stderr, flush=True)
    print(header_line(), flush=True)
    try:
        while True:
            for row in w.drain():
                print(row_line(row), flush=True)
            time.sleep(0.1)
    except KeyboardInterrupt:
        pass
    finally:
        w.stop()
        for row in w.drain():
            print(row_line(row), flush=True)
        print(f"replayer watch: {totals_line(w.totals, w.build_label)}", file=sys.stderr)
    return 0


def add_parser(sub: Any) -> None:
    """Arguments of ``replayer watch``: the proxy's, build B and the cost model's."""
    from replayer.cli_args import add_options
    from replayer.cli_record import add_proxy_options
    from replayer.core.options import KNOBS, MODEL

    p = sub.add_parser("watch", help="the app on a recording proxy: each request as it passes, what the server "
                                     "re-processed beside what build B's simulation predicts")
    add_proxy_options(p)
    p.add_argument("--lines", action="store_true", help="no app: print one line a request")
    add_options(p, ("server_args", "server_log", "b", *MODEL, *KNOBS),
                server_log="the upstream llama-server's own log (its --log-file, stderr or --log-jsonl file), "
                           "followed from now on: the slot it ran each request on (answers of older builds do not "
                           "say) and whether it re-processed the whole prompt",
                server_args="the upstream llama-server's command line (slots, --cache-ram, …), or @file holding "
                            "it: build B's simulated server runs it (default: B's own defaults, with the "
                            "upstream's number of slots)",
                b="the build whose simulation is shown beside the server (number or generation)",
                tokenizer="estimate | gguf:PATH (default: the upstream server's own /apply-template and /tokenize)")
    p.set_defaults(func=cmd_watch)
