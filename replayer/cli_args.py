"""Argument checks for the CLI: every number with its range, text files that are text.

argparse's own ``type=int`` takes ``-b 1000000000000`` and ``type=float`` takes ``nan``;
both then travel into schedules and servers and fail far from their cause. The types here
refuse them where they are typed, as one line and exit status 2.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Callable, NoReturn

#: the largest token count any option may name: far beyond any context llama.cpp can hold (2^24)
MAX_TOKENS = 1 << 24


class OneLineParser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line (the usage block is for ``--help``)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"replayer: error: {' '.join(message.split())} (see {self.prog} --help)\n")


def int_in(lo: int, hi: int | None = None) -> Callable[[str], int]:
    """An ``int`` type that refuses values outside ``[lo, hi]``."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip().replace("_", ""), 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < lo or (hi is not None and value > hi):
            raise argparse.ArgumentTypeError(f"{text} is out of range ({_range(lo, hi)})")
        return value

    parse.__name__ = "integer"  # argparse names the type in its own messages
    return parse


def float_in(lo: float, hi: float | None = None, *, open_low: bool = False) -> Callable[[str], float]:
    """A finite ``float`` type in ``[lo, hi]`` (``(lo, hi]`` with ``open_low``): no nan, no inf."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text} is not a finite number")
        if value < lo or (open_low and value == lo) or (hi is not None and value > hi):
            low = f"> {lo:g}" if open_low else f"≥ {lo:g}"
            high = f", ≤ {hi:g}" if hi is not None else ""
            raise argparse.ArgumentTypeError(f"{text} is out of range ({low}{high})")
        return value

    parse.__name__ = "number"
    return parse


def _range(lo: int, hi: int | None) -> str:
    return f"{lo}…{hi:,}" if hi is not None else f"≥ {lo}"


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
