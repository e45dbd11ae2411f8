"""Why a batch ended: the five break reasons, their default colours and what each means.

Written once here; the scheduler's rule (``schedule.ReasonRule``) produces these names,
the comparison counts them, the themes and the timeline colour them.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BreakReason:
    name: str
    colour: str  # the default theme's; a theme overrides it through ``theme_var``
    meaning: str
    label: str  # at most 9 characters: a narrow pane's batch list shows this
    glyph: str = "┃"  # the timeline's mark where such a batch ends: readable without colour (NO_COLOR)
    always_listed: bool = True  # listed in a run's counts even when 0

    @property
    def theme_var(self) -> str:
        return "reason-" + self.name.replace("_", "-")


REASONS: tuple[BreakReason, ...] = (
    BreakReason("n_batch", "#98C379", "the batch is full (-b)", "n_batch", "┃"),
    BreakReason("user_start", "#E06C75", "a user/tool-result message starts here (the #25213 regression)",
                "user/tool", "╋"),
    BreakReason("checkpoint_offset", "#E5C07B", "a checkpoint is taken near the prompt end (N-4-ub, N-4)",
                "ckpt", "┇"),
    BreakReason("prompt_end", "#4FA3E0", "the prompt ends", "end", "▐"),
    BreakReason("other", "#888888", "none of the rules above", "other", "╎", always_listed=False),
)
BREAK_REASONS: tuple[str, ...] = tuple(r.name for r in REASONS)
REASON_LABELS: dict[str, str] = {r.name: r.label for r in REASONS}
