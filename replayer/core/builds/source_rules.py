"""Which prefill rules a llama.cpp source tree follows, read from its code, not from a number.

A build made from a checkout, a branch or a patch has no release number to look up, and a
patch can move a release to another generation (b9934 + the #25420 fix batches like b9940).
So the generation is read from ``tools/server/server-context.cpp`` itself: each field of a
``catalog.Generation`` is decided by the code that implements it, matched on the comment-free,
whitespace-collapsed text (so formatting and comments do not matter, code does):

- ``user_breaks``: the prompt-filling loop ends a batch at a user start unconditionally (G1,
  PR #24176: ``if (spans.is_user_start(slot.prompt.n_tokens())) break;``) or only where a
  checkpoint is due (G2+, PR #25420: ``if (do_checkpoint && spans.is_user_start(…))`` with the
  last-user / empty / min-step test);
- ``spacing``: the min-step test after the loop also passes ``near_prompt_end`` (G2b+, PR #25472);
- ``evict_too_close``: ``create_checkpoint`` erases older tasks' checkpoints within min-step
  ("erasing context checkpoint too close to an earlier one", G2b+);
- ``evict_only_when_full``: that erasing runs only when ``checkpoints.size() + 1 >= n_ctx_checkpoints`` (G3);
- ``supersede``: a new checkpoint replaces one at the same ``n_tokens`` ("superseding", G3).

The combination must be one of the catalog's generations; any other (a tree with new rules, or
with code these patterns do not recognise) gets ``None``: such a build runs live only. The
patterns were read off the sdists of b9859, b9934, b9940, b9981, b10001, b10865 and b11434, and
``tests/test_source_builds_live.py`` checks each of those detects as its catalog generation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from replayer.core.builds.catalog import GENERATIONS, Generation

SERVER_FILE = "tools/server/server-context.cpp"
MAX_SOURCE_BYTES = 16 * 1024 * 1024  # server-context.cpp is ~250 KB; anything this big is not it

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')


def _code(text: str) -> str:
    """Comments removed (outside string literals) and every run of whitespace made one space."""
    out, pos = [], 0
    for m in _STRING.finditer(text):  # strings kept whole: a "//" inside one is not a comment
        out.append(_COMMENT.sub(" ", text[pos:m.start()]))
        out.append(m.group(0))
        pos = m.end()
    out.append(_COMMENT.sub(" ", text[pos:]))
    return " ".join("".join(out).split())


def _has(code: str, *pattern: str) -> bool:
    """Whether the tokens appear in order with only whitespace between them."""
    rx = r"\s*".join(re.escape(p) for p in pattern)
    return re.search(rx, code) is not None


@dataclass(frozen=True)
class Detected:
    """What the code says, field by field, and the generation with exactly those fields."""

    user_breaks: str | None
    spacing: str | None
    evict_too_close: bool
    evict_only_when_full: bool
    supersede: bool
    generation: Generation | None

    def describe(self) -> str:
        if self.generation is not None:
            return f"{self.generation.value} ({self.generation.label}), read from {SERVER_FILE}"
        return (f"no known generation (user breaks: {self.user_breaks or 'not recognised'}, "
                f"checkpoint spacing: {self.spacing or 'not recognised'}): live runs only")


def detect_text(text: str) -> Detected:
    code = _code(text)
    if _has(code, "if (do_checkpoint && spans.is_user_start(slot.prompt.n_tokens()))"):
        user_breaks = "where_checkpoint_due"
    elif _has(code, "if (spans.is_user_start(slot.prompt.n_tokens())) { break; }"):
        user_breaks = "every_user"
    else:
        user_breaks = None
    spacing_near_end = _has(code, "is_last_user_message || near_prompt_end ||")
    spacing_plain = _has(code, "slot.prompt.checkpoints.empty() || is_last_user_message ||")
    spacing = ("min_step_or_last_user_or_near_end" if spacing_near_end
               else "min_step_or_last_user" if spacing_plain else None)
    too_close = "erasing context checkpoint too close to an earlier one" in code
    when_full = _has(code, "slot.prompt.checkpoints.size() + 1 >= (size_t) params_base.n_ctx_checkpoints &&")
    supersede = "superseding context checkpoint" in code
    gen = next((g for g in GENERATIONS if (g.user_breaks, g.spacing, g.evict_too_close, g.evict_only_when_full,
                                           g.supersede) == (user_breaks, spacing, too_close, when_full, supersede)),
               None)
    return Detected(user_breaks, spacing, too_close, when_full, supersede, gen)


def detect(tree: Path) -> Detected:
    """The rules of the llama.cpp source tree at ``tree`` (its ``server-context.cpp``)."""
    f = tree / SERVER_FILE
    if not f.is_file() or f.stat().st_size > MAX_SOURCE_BYTES:
        return Detected(None, None, False, False, False, None)
    return detect_text(f.read_text(encoding="utf-8", errors="replace"))
