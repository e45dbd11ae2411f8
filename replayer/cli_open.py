"""``replayer WORD``: a session file to open in the app, or a mistyped subcommand.

A first word that is no subcommand is a session path; when no such file exists and the word
is close to a subcommand (``inpsect``), it was a typo, and the error says so instead of
"no such file". A file that exists but cannot be imported (a folder, a binary, an empty or a
system-only file) is the same one-line error and exit 2 as ``replayer inspect`` gives, before
the app starts, rather than an app that opens on the picker and exits 0.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from replayer.cli_args import SUBCOMMANDS
from replayer.core.errors import ReplayerError, did_you_mean


def check_session_arg(word: str, commands: set[str]):
    """The imported session ``word`` names; raises ReplayerError with a one-line reason."""
    from replayer.core.session import load_session

    p = Path(word).expanduser()
    if not p.exists() and "/" not in word and "." not in word:
        hint = did_you_mean(word, sorted(commands))
        if hint:
            raise ReplayerError(f"unknown command '{word}' (did you mean {hint}?)")
    return load_session(p)


def cmd_app(args: argparse.Namespace) -> int:
    try:
        from replayer.ui.app import run_app
    except ImportError as exc:  # pragma: no cover - the app ships with the package
        raise ReplayerError(f"the app could not start: {exc}") from None
    session = getattr(args, "session", None)
    if session is not None:
        loaded = check_session_arg(session, SUBCOMMANDS)  # a typo or a bad file: one line, exit 2
        return run_app(session=session, loaded=loaded)
    return run_app(session=session, demo=getattr(args, "demo", False))

