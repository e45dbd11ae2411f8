"""Argument checks for the CLI: every number with its range, text files that are text.

argparse's own ``type=int`` takes ``-b 1000000000000`` and ``type=float`` takes ``nan``;
both then travel into schedules and servers and fail far from their cause. The types here
refuse them where they are typed, as one line and exit status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable, Iterable, NoReturn

import orjson

from replayer.core import options
from replayer.core.errors import ReplayerError
from replayer.core.options import MAX_TOKENS  # noqa: F401  (re-exported)

#: the first words that are sub-commands (any other first word is a session to open in the app)
SUBCOMMANDS = {"inspect", "layout", "schedule", "replay", "presets", "builds", "models", "demo", "app",
               "bisect", "advise", "record", "watch", "agents"}


def _argparse_type(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """A typed, ranged parser of the option table as an argparse type: its message, one line."""

    def typed(text: str) -> Any:
        try:
            return parse(text)
        except options.BadValue as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    typed.__name__ = parse.__name__  # argparse names the type in its own messages
    return typed


def int_in(lo: int, hi: int | None = None) -> Callable[[str], int]:
    """An ``int`` argument that refuses values outside ``[lo, hi]``."""
    return _argparse_type(options.int_in(lo, hi))


def float_in(lo: float, hi: float | None = None, *, open_low: bool = False) -> Callable[[str], float]:
    """A finite ``float`` argument in ``[lo, hi]`` (``(lo, hi]`` with ``open_low``)."""
    return _argparse_type(options.float_in(lo, hi, open_low=open_low))


def add_options(p: argparse.ArgumentParser, names: Iterable[str], **help: str) -> None:
    """The option table's options as ``p``'s arguments, in this order; ``help`` overrides by name
    (a command that says an option differently, such as bisect's ``--timeout``)."""
    for name in names:
        opt = options.option(name)
        kw = opt.argument()
        if "type" in kw:
            kw["type"] = _argparse_type(kw["type"])
        p.add_argument(*opt.flags, help=help.get(name) or opt.help, **kw)


class OneLineParser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line (the usage block is for ``--help``)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"replayer: error: {' '.join(message.split())} (see {self.prog} --help)\n")


def stdout_failed(exc: OSError) -> str:
    """The one line for an unwritable standard output (a full disk, /dev/full, a closed pipe),
    after pointing stdout at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    return f"cannot write to standard output: {exc.strerror or exc}"


# -- what the CLI prints ---------------------------------------------------------------

def out(data: bytes | str) -> None:
    """Everything the CLI prints goes through here, so through the redaction policy."""
    from replayer.core.redact import redact, redact_bytes

    data = redact_bytes(data) if isinstance(data, bytes) else redact(data)
    try:
        if isinstance(data, bytes):
            sys.stdout.buffer.write(data + (b"" if data.endswith(b"\n") else b"\n"))
        else:
            sys.stdout.write(data if data.endswith("\n") else data + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:  # a full disk, /dev/full
        raise ReplayerError(stdout_failed(exc)) from None


def print_json(obj: Any) -> None:
    out(orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS))


def progress_printer(prefix: str):
    """Build progress on stderr: each stage, then every 10 %."""
    state = {"stage": None, "pct": -1}

    def progress(stage: str, frac: float) -> None:
        pct = int(frac * 100)
        if stage != state["stage"] or pct >= state["pct"] + 10 or stage == "done":
            state.update(stage=stage, pct=pct)
            print(f"{prefix} {stage} {pct}%", file=sys.stderr, flush=True)

    return progress
