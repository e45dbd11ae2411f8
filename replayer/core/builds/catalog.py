"""Behaviour generations of llama-server's prefill scheduler, keyed by build number.

The boundaries are those of ``spec/llama-server-prefill.md`` §1. The package index skips
builds, so each change landed somewhere in a gap between two examined builds; a number
inside such a gap is mapped to the older generation and the ``note`` says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from replayer.core.errors import ReplayerError, did_you_mean


UserBreaks = Literal["before_last_user", "every_user", "where_checkpoint_due"]
Spacing = Literal["min_step", "min_step_or_last_user", "min_step_or_last_user_or_near_end"]


@dataclass(frozen=True, eq=False)
class Generation:
    """One behaviour generation of the prefill scheduler, as data the scheduler reads.

    ``user_breaks``: where a batch ends at a user/tool-result start — only before the last
    user message (G0), at every one (G1), or only where a checkpoint is due (G2+).
    ``spacing``: when a checkpoint closer than ``checkpoint_min_step`` to the previous one is
    still taken (at the last user start; also near the prompt end from G2b).
    ``evict_too_close``: creating a checkpoint first erases older tasks' ones that sit within
    min-step of each other; ``evict_only_when_full`` does so only once the list is full.
    ``supersede``: a new checkpoint replaces one at the same position.
    Compared by identity (a record is the generation); hashed by name.
    """

    name: str
    label: str
    first_build: int  # first examined build of the generation
    last_build: int | None  # last examined build; None = still current
    representative_build: int  # the real build the spec's vectors ran on
    pr: str | None
    user_breaks: UserBreaks
    spacing: Spacing
    evict_too_close: bool = False
    evict_only_when_full: bool = False
    supersede: bool = False
    default_checkpoint_min_step: int = 8192
    aliases: tuple[str, ...] = ()

    @property
    def value(self) -> str:
        return self.name

    @property
    def token_space_spans(self) -> bool:
        """G1+ find user starts on token ids; G0 takes the byte offset of the last user."""
        return self.user_breaks != "before_last_user"

    def __hash__(self) -> int:
        return hash(self.name)

    def __repr__(self) -> str:
        return f"Generation.{self.name.upper()}"


#: The catalog, oldest first (``spec/llama-server-prefill.md`` §1): adding a generation is adding a record.
GENERATIONS: list[Generation] = [
    Generation("G0", "pre-regression: break before the last user message only", 0, 9763, 9763, None,
               "before_last_user", "min_step", default_checkpoint_min_step=256, aliases=("pre",)),
    Generation("G1", "regression: break at every user/tool-result start", 9771, 9934, 9859, "#24176",
               "every_user", "min_step_or_last_user", aliases=("reg", "regression")),
    Generation("G2a", "fixed: break only where a checkpoint is due", 9940, 9976, 9940, "#25420",
               "where_checkpoint_due", "min_step_or_last_user", aliases=("fix1",)),
    Generation("G2b", "fixed + near-end checkpoints, evict too-close", 9981, 10852, 10001, "#25472",
               "where_checkpoint_due", "min_step_or_last_user_or_near_end", evict_too_close=True,
               aliases=("fix2", "fixed")),
    Generation("G3", "latest: evict when full, supersede duplicates", 10865, None, 11434, None,
               "where_checkpoint_due", "min_step_or_last_user_or_near_end", evict_too_close=True,
               evict_only_when_full=True, supersede=True, aliases=("latest",)),
]
for _g in GENERATIONS:  # Generation.G0 … Generation.G3 for code and tests that name one
    setattr(Generation, _g.name.upper(), _g)
del _g

#: Representative real build per generation (derived from the catalog).
REPRESENTATIVE_BUILD = {g: g.representative_build for g in GENERATIONS}

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
    name: str | None = None  # a source build's label (``b9934+fix``, a commit): its number alone is not it

    @property
    def effective_number(self) -> int:
        return self.number if self.number is not None else self.generation.representative_build

    @property
    def label(self) -> str:
        if self.name is not None:
            return self.name
        return f"b{self.number}" if self.number is not None else self.generation.value

    @property
    def default_checkpoint_min_step(self) -> int:
        return self.generation.default_checkpoint_min_step

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
        return self.generation.token_space_spans

    def describe(self) -> str:
        return f"{self.label} — {self.generation.label} ({self.generation.value})"


def generation_of(number: int) -> tuple[Generation, str | None]:
    """Map a build number to its generation, with a note when it is not examined."""
    if number < 0:
        raise ReplayerError(f"build number must be positive, got {number}")
    for gen, nxt in zip(GENERATIONS, [*GENERATIONS[1:], None]):
        if nxt is not None and number >= nxt.first_build:
            continue
        note = None
        if gen.last_build is not None and number > gen.last_build:
            note = (f"b{number} lies between examined builds; the change landed in this gap, "
                    f"assuming {gen.value}")
        elif number < FIRST_INDEXED_BUILD:
            note = f"b{number} is older than any examined build; assuming {gen.value}"
        elif gen.last_build is None and number > LAST_EXAMINED_BUILD:
            note = f"b{number} is newer than the last examined build b{LAST_EXAMINED_BUILD}; assuming {gen.value}"
        return gen, note
    raise AssertionError("unreachable")  # pragma: no cover


def parse_build(text: str | int) -> Build:
    """Accept ``9859``, ``b9859``, ``G1``, ``g2b`` or a vector alias such as ``fix2``."""
    raw = str(text).strip()
    m = re.fullmatch(r"[bB]?(\d+)(?:\.0\.0)?", raw)
    if m:
        number = int(m.group(1))
        gen, note = generation_of(number)
        return Build(gen, number, note)
    for gen in GENERATIONS:
        if raw.lower() == gen.name.lower() or raw.lower() in gen.aliases:
            return Build(gen)
    names = [g.name for g in GENERATIONS] + [a for g in GENERATIONS for a in g.aliases]
    hint = did_you_mean(raw, names)
    raise ReplayerError(
        f"unknown build {raw!r}: give a build number like 9859 or b10001, or a generation "
        f"({', '.join(g.name for g in GENERATIONS)})",
        hint=f"did you mean {hint}?" if hint else None,
    )


#: Presets offered in pickers: the builds users compare most.
BUILD_PRESETS: list[tuple[str, str]] = [
    ("9859", "b9859 — regression (G1, #25213)"),
    ("10001", "b10001 — fixed (G2b)"),
    ("9763", "b9763 — pre-regression (G0)"),
    ("9940", "b9940 — first fix (G2a)"),
    ("11434", "b11434 — latest examined (G3)"),
]
