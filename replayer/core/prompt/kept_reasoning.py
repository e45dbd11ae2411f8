"""What-if ``--keep-reasoning``: each turn's prompt as if the history kept the text it was sent with.

Templates in the manner of Qwen3 render an assistant message's reasoning only while it belongs
to the current task (after the last user message). When the next user message arrives, the
earlier messages lose their reasoning, the new prompt no longer starts with what the server
holds, and the server re-processes from there (``misses``: ``template_dropped_reasoning``).
A client that sent the history back as it was rendered (or a template that kept the reasoning)
would have had it reused.

So the what-if prompt of turn *k* is the what-if prompt of turn *k − 1* without its generation
prompt, followed by turn *k*'s new messages exactly as turn *k*'s real render shows them (from
the marker of its first new message, the assistant response the agent got). Every message thus
stays as it was rendered the first time it was sent: with its reasoning while its task was
current. Nothing is invented: the reasoning of a task's last assistant message appears in no
real prompt (the request that first carries it already follows a new user message), so it is
not in the what-if either.

A turn that does not extend the previous one (a compaction, an edit, other tools), or whose
render does not mark each assistant message once, keeps its real prompt, and the chain starts
again from it. Turns whose what-if prompt differs from the real one are laid out one by one —
the cost of a template that already had to be rendered turn by turn.
"""

from __future__ import annotations

import dataclasses

from replayer.core.builds.catalog import Build
from replayer.core.prompt.turn_layouts import TurnLayouts, TurnPrompt, marks_of, prompt_of_text
from replayer.core.session.turns import Turn


def _assistants(turn: Turn, start: int = 0) -> int:
    """The assistant messages of ``turn`` from message ``start`` on, read in place."""
    return sum(1 for i in range(start, turn.n_messages) if turn.message(i).get("role") == "assistant")


def keep_reasoning(lay: TurnLayouts, build: Build) -> tuple[TurnLayouts, int]:
    """The layouts with every turn's what-if prompt, and how many turns changed.

    Linear in the session's messages: a turn that begins with the previous one (every turn of
    an imported session, by construction) counts only its new messages, and no turn's prefix
    is copied (``Turn.messages`` would copy it, once per turn)."""
    out = dataclasses.replace(lay, prompts=[])
    family = max((p.family for p in lay.prompts), default=0) + 1
    prev: TurnPrompt | None = None
    kept_prev = ""  # the previous turn's what-if text
    gen_prev: int | None = None  # the length of its generation prompt (None: unknown)
    n_a_prev = 0  # its assistant messages
    changed = 0
    for p in lay.prompts:
        text = p.text
        marks = marks_of(text, lay.delimiters, "assistant")
        grows = prev is not None and p.turn.starts_with(prev.turn)
        n_a = n_a_prev + _assistants(p.turn, prev.turn.n_messages) if grows else _assistants(p.turn)
        # one marker per assistant message, and one for the generation prompt unless the
        # turn ends with an assistant message the model continues (the resume request)
        marked = len(marks) in (n_a, n_a + 1)
        kept = text
        # the turn extends the previous one: its messages plus an assistant response and more
        if (marked and grows and gen_prev is not None and p.turn.n_messages > prev.turn.n_messages
                and p.turn.message(prev.turn.n_messages).get("role") == "assistant"
                and prev.turn.same_fields(p.turn)):
            kept = kept_prev[:len(kept_prev) - gen_prev] + text[marks[n_a_prev]:]
        if kept != text:
            p, _ = prompt_of_text(family, p.turn, kept, lay.template, lay.delimiters, lay.tok_obj, build)
            family += 1
            changed += 1
        out.prompts.append(p)
        prev, kept_prev, n_a_prev = p, kept, n_a
        gen_prev = len(text) - marks[-1] if len(marks) == n_a + 1 else None
    return out, changed
