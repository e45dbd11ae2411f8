"""``replayer``: one entry point. No arguments opens the app; subcommands work headless.

Every user-caused failure ends as one line on stderr and a non-zero exit (2 for bad
input, 1 for a failed run, 130 on Ctrl-C); a traceback means a bug in replayer.

This module is only the entry point; the parsers are in ``cli_parser.py`` and each command in
a module named for it (``cli_replay``, ``cli_layout`` for layout and schedule, ``cli_bisect``,
``cli_advise``, ``cli_builds`` for builds, models and presets, ``cli_inspect``, ``cli_record``,
``cli_agents``, ``cli_source``, ``cli_open`` for the app).
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from replayer.cli_args import SUBCOMMANDS, stdout_failed
from replayer.cli_open import cmd_app
from replayer.cli_parser import build_parser  # noqa: F401  (the parser, for tests and docs)
from replayer.core.errors import ReplayerError
from replayer.core.options import config_from as _config  # noqa: F401  (the replay choices of parsed options)


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
    from replayer.core.processes import stop_on_signals

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
