"""Behaviour generations of llama-server's prefill scheduler, keyed by build number.

The boundaries are those of ``spec/llama-server-prefill.md`` §1. The package index skips
builds, so each change landed somewhere in a gap between two examined builds; a number
inside such a gap is mapped to the older generation and the ``note`` says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from replayer.core.errors import ReplayerError, did_you_mean


class Generation(str, Enum):
    G0 = "G0"  # pre-regression: one break before the last user message
    G1 = "G1"  # PR #24176: break at every user start, unconditionally
    G2A = "G2a"  # PR #25420: break only where a checkpoint is due
    G2B = "G2b"  # PR #25472: near-end bypasses min-step; evict "too close" of older tasks
    G3 = "G3"  # eviction only when full; superseding duplicates

    @property
    def label(self) -> str:
        return GENERATION_LABELS[self]


GENERATION_LABELS = {
    Generation.G0: "pre-regression: break before the last user message only",
    Generation.G1: "regression: break at every user/tool-result start",
    Generation.G2A: "fixed: break only where a checkpoint is due",
    Generation.G2B: "fixed + near-end checkpoints, evict too-close",
    Generation.G3: "latest: evict when full, supersede duplicates",
}

#: (generation, first examined build, last examined build); None = open-ended.
GENERATION_RANGES: list[tuple[Generation, int, int | None]] = [
    (Generation.G0, 0, 9763),
    (Generation.G1, 9771, 9934),
    (Generation.G2A, 9940, 9976),
    (Generation.G2B, 9981, 10852),
    (Generation.G3, 10865, None),
]
GENERATIONS = [g for g, _, _ in GENERATION_RANGES]

#: Representative real build per generation (the ones the spec's vectors ran on).
REPRESENTATIVE_BUILD = {
    Generation.G0: 9763,
    Generation.G1: 9859,
    Generation.G2A: 9940,
    Generation.G2B: 10001,
    Generation.G3: 11434,
}

FIRST_INDEXED_BUILD = 9093
LAST_EXAMINED_BUILD = 11434
QWEN3_CODER_TOOL_DELIMITER_BUILD = 10227
MINICPM5_TOOL_DELIMITER_BUILD = 9859


@dataclass(frozen=True)
class Build:
    """A server build as the scheduler sees it.

    ``number`` is None when the user named a generation rather than a build; the
    representative build of that generation then stands in for build-dependent details.
    """

    generation: Generation
    number: int | None = None
    note: str | None = None

    @property
    def effective_number(self) -> int:
        return self.number if self.number is not None else REPRESENTATIVE_BUILD[self.generation]

    @property
    def label(self) -> str:
        return f"b{self.number}" if self.number is not None else self.generation.value

    @property
    def default_checkpoint_min_step(self) -> int:
        return 256 if self.generation is Generation.G0 else 8192

    @property
    def tool_delimiters_for_qwen3_coder(self) -> bool:
        """From b10227 the Qwen3-Coder family lists tool-response delimiters as TOOL."""
        return self.effective_number >= QWEN3_CODER_TOOL_DELIMITER_BUILD

    @property
    def minicpm5_tool_delimiter(self) -> bool:
        return self.effective_number >= MINICPM5_TOOL_DELIMITER_BUILD

    @property
    def token_space_spans(self) -> bool:
        """G1+ detect user starts on token ids; G0 uses the byte offset of the last user."""
        return self.generation is not Generation.G0

    def describe(self) -> str:
        return f"{self.label} — {self.generation.label} ({self.generation.value})"


def generation_of(number: int) -> tuple[Generation, str | None]:
    """Map a build number to its generation, with a note when it is not examined."""
    if number < 0:
        raise ReplayerError(f"build number must be positive, got {number}")
    previous: Generation | None = None
    for gen, first, last in GENERATION_RANGES:
        if number < first:
            assert previous is not None
            return previous, (
                f"b{number} lies between examined builds; the change landed in this gap, "
                f"assuming {previous.value}"
            )
        if last is None or number <= last:
            note = None
            if number < FIRST_INDEXED_BUILD:
                note = f"b{number} is older than any examined build; assuming {gen.value}"
            elif last is None and number > LAST_EXAMINED_BUILD:
                note = (
                    f"b{number} is newer than the last examined build b{LAST_EXAMINED_BUILD}; "
                    f"assuming {gen.value}"
                )
            return gen, note
        previous = gen
    raise AssertionError("unreachable")  # pragma: no cover


_ALIASES = {
    "pre": Generation.G0,
    "reg": Generation.G1,
    "regression": Generation.G1,
    "fix1": Generation.G2A,
    "fix2": Generation.G2B,
    "fixed": Generation.G2B,
    "latest": Generation.G3,
}


def parse_build(text: str | int) -> Build:
    """Accept ``9859``, ``b9859``, ``G1``, ``g2b`` or a vector alias such as ``fix2``."""
    raw = str(text).strip()
    m = re.fullmatch(r"[bB]?(\d+)(?:\.0\.0)?", raw)
    if m:
        number = int(m.group(1))
        gen, note = generation_of(number)
        return Build(gen, number, note)
    for gen in Generation:
        if raw.lower() == gen.value.lower():
            return Build(gen)
    if raw.lower() in _ALIASES:
        return Build(_ALIASES[raw.lower()])
    names = [g.value for g in Generation] + list(_ALIASES)
    hint = did_you_mean(raw, names)
    raise ReplayerError(
        f"unknown build {raw!r}: give a build number like 9859 or b10001, or a generation "
        f"({', '.join(g.value for g in Generation)})",
        hint=f"did you mean {hint}?" if hint else None,
    )


#: Presets offered in pickers: the builds users compare most.
BUILD_PRESETS: list[tuple[str, str]] = [
    ("9859", "b9859 — user-start breaks (G1, the #25213 regression)"),
    ("10001", "b10001 — fixed (G2b)"),
    ("9763", "b9763 — pre-regression (G0)"),
    ("9940", "b9940 — first fix (G2a)"),
    ("11434", "b11434 — latest examined (G3)"),
]
