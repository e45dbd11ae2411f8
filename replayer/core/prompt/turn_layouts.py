"""Every turn's prompt, rendered and tokenized as the server would, without one render per turn.

A session of 2,000 messages sends ~1,000 requests; rendering and tokenizing each from
scratch costs O(turns × prompt). Most templates are *prefix-stable*: the prompt of a turn
that stops before an assistant response is the whole conversation's text up to that
response's header, followed by the generation prompt (which is that same header). So the
turns that are prefixes of one later request (a *family*: the session's turns all belong to
the resume request's family, a request log starts a new family at each edit) are derived
from that request's single render and tokenization: turn *k* = text before the *k*-th
assistant marker + the generation prompt; its tokens = the tokens before that marker + the
generation prompt's tokens (markers start with a special token, where the tokenizer splits
anyway, so the prefix tokenizes the same alone).

The derivation is checked, not assumed: a few turns of each family
are rendered for real and must be byte-identical (and, for an exact tokenizer, token-
identical): the first two turns of each *shape* (last role, and whether reasoning of the
current task precedes the end — what templates decide on). A
template that changes earlier text as the conversation grows (one that drops
reasoning of earlier turns, or numbers messages) fails the check, and that family falls
back to a real render per turn — slower, always right.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from replayer.core.builds.catalog import Build
from replayer.core.runspec import PromptSpans
from replayer.core.prompt import templates
from replayer.core.prompt.estimate import counts_between
from replayer.core.prompt.layout import ExactTokenizer, PromptLayout, layout_of_text, offline_tokenizer
from replayer.core.prompt.templates import Template
from replayer.core.session.turns import Turn, response_starts, thread_of


@dataclass(slots=True)
class TurnPrompt:
    """One turn's prompt. Text and ids are kept as (shared base, cut, suffix): a thousand
    turns of a 128k-token session would otherwise hold gigabytes of copies. Slotted: a
    session makes one per turn, and an instance dict each was a thousand more objects for
    the collector to walk."""

    index: int
    n_tokens: int
    base_spans: PromptSpans  # the turn's spans; for a derived turn, its family's whole prompt's
    turn: Turn
    family: int
    base: str
    cut: int
    suffix: str
    base_ids: list[int] | None = None
    tcut: int = 0
    suffix_ids: list[int] | None = None
    derived: bool = False
    n_users: int = 0  # a derived turn's user starts: the first n_users of base_spans'
    # the last answers of spans_from and shared_prefix: both builds of a session ask the same
    # question of each turn (not copied by dataclasses.replace)
    _reach: tuple[int, PromptSpans | None] | None = field(default=None, init=False, repr=False, compare=False)
    _shared: tuple[TurnPrompt, Shared] | None = field(default=None, init=False, repr=False, compare=False)
    # estimated tokens of base[:c] by c, one dict for the family (its prompts share the base):
    # slot selection and the host cache compare a thousand requests with other families' prompts
    # and cut at the same few places (the estimate's shared prefix, ``_count_to``)
    counts: dict[int, int] = field(default_factory=dict, repr=False, compare=False)
    # the server's common prefix with earlier prompts, by id(old) → (old, tokens): slot selection,
    # the host cache and the chosen slot ask the same pairs again, and build B asks A's (``slots.lcp``)
    _lcp: dict[int, tuple[TurnPrompt, int]] | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def spans(self) -> PromptSpans:
        """The turn's spans. A derived turn builds them on demand: each turn holding its own
        copy of the user starts would make a thousand-turn session quadratic."""
        if not self.derived:
            return self.base_spans
        return PromptSpans(self.n_tokens, self.base_spans.user_starts[:self.n_users])

    def spans_from(self, pos: int) -> PromptSpans | None:
        """The spans with only the user starts from ``pos`` on (and always the last one), or
        None when that would drop at most one: what a prefill from ``pos`` can reach."""
        reach = self._reach  # read once: the two runs may ask from two threads
        if reach is not None and reach[0] == pos:
            return reach[1]
        starts = self.base_spans.user_starts
        n = self.n_users if self.derived else len(starts)
        i = bisect_left(starts, pos, 0, n)
        spans = None if i <= 1 else PromptSpans(self.n_tokens, starts[i:n] or starts[n - 1:n],
                                                None if self.derived else self.base_spans.n_before_user)
        self._reach = (pos, spans)
        return spans

    @property
    def text(self) -> str:
        return self.base[:self.cut] + self.suffix

    def text_head(self, k: int) -> str:
        """``text[:k]``, built only that far."""
        return self.base[:k] if k <= self.cut else self.base[:self.cut] + self.suffix[:k - self.cut]

    def ids_head(self, k: int) -> list[int]:
        """``ids[:k]`` of a prompt with ids, built only that far."""
        assert self.base_ids is not None and self.suffix_ids is not None
        return self.base_ids[:k] if k <= self.tcut else self.base_ids[:self.tcut] + self.suffix_ids[:k - self.tcut]

    @property
    def ids(self) -> list[int] | None:
        if self.base_ids is None or self.suffix_ids is None:
            return None
        return self.base_ids[:self.tcut] + self.suffix_ids


@dataclass
class TurnLayouts:
    prompts: list[TurnPrompt]
    template: Template
    delimiters: list[templates.Delimiter]
    tokenizer: str
    exact: bool
    renders: int = 0  # real renders done (the cost this module exists to keep low)
    fallbacks: list[str] = field(default_factory=list)  # why a family was rendered turn by turn
    tok_obj: ExactTokenizer | None = None  # the tokenizer itself (None: the estimate), for later passes


class _Recording:
    """An exact tokenizer that keeps the ids of the first whole-prompt encode (layout_of_text's)."""

    def __init__(self, tok: ExactTokenizer) -> None:
        self.tok = tok
        self.name = tok.name
        self.ids: list[int] | None = None

    def encode(self, text: str, add_special: bool = True) -> list[int]:
        ids = self.tok.encode(text, add_special=add_special)
        if add_special and self.ids is None:
            self.ids = ids
        return ids


def families(turns: list[Turn]) -> list[tuple[Turn, list[tuple[Turn, int]]]]:
    """Group turns under the latest request of their thread they are a response-boundary prefix of.

    Returns (base turn, [(member turn, message count)]) with members in turn order; the base
    is its own last member. A turn that ends with an assistant message (the resume request of a
    conversation whose last word was the model's) is continued, not given a generation prompt:
    it is a family of its own. Each thread's turns are grouped apart (a subagent's requests
    between the main turns do not split the main thread's family), so families of different
    threads interleave in turn order.
    """
    out: list[tuple[Turn, list[tuple[Turn, int]]]] = []
    open_: dict[str, tuple[Turn, set[int], list[tuple[Turn, int]]]] = {}  # thread → base, its starts, members
    for t in reversed(turns):
        m, th = t.n_messages, thread_of(t)
        fam = open_.get(th)
        if fam is not None:
            base, starts, members = fam
            if (m in starts and t.same_fields(base)
                    and (t.prefix_of == base.index or base.messages[:m] == t.messages)):
                members.append((t, m))
                continue
            out.append((base, members[::-1]))
            del open_[th]
        if t.messages and t.messages[-1].get("role") == "assistant":
            # a continued assistant message: rendered with no generation prompt, so no earlier
            # turn's prompt is a cut of it; a family of its own, the turn before it the next base
            out.append((t, [(t, m)]))
            continue
        open_[th] = (t, set(response_starts(t.messages)), [(t, m)])
    out.extend((base, members[::-1]) for base, _, members in open_.values())
    return sorted(out, key=lambda f: f[1][0][0].index)  # by each family's first turn


def turn_layouts(turns: list[Turn], *, template: Template | None = None, tokenizer: str = "estimate",
                 build: Build, verify: bool = True) -> TurnLayouts:
    tok, tpl = offline_tokenizer(tokenizer, template)
    delims = templates.delimiters_for(tpl, build)
    out = TurnLayouts([], tpl, delims, tok.name if tok else "estimate", tok is not None, tok_obj=tok)
    for fam, (base, members) in enumerate(families(turns)):
        prompts = _derive(fam, base, members, tpl, delims, tok, build, out, verify)
        if prompts is None:
            prompts = [_render(fam, t, tpl, delims, tok, build, out)[0] for t, _ in members]
        out.prompts.extend(prompts)
    out.prompts.sort(key=lambda p: p.index)  # in turn order: the threads' families interleave
    return out


def _render(fam: int, t: Turn, tpl: Template, delims, tok: ExactTokenizer | None, build: Build,
            out: TurnLayouts) -> tuple[TurnPrompt, PromptLayout]:
    if t.prompt is not None:  # the server logged the prompt itself (--log-prompts-dir): no template
        return prompt_of_text(fam, t, t.prompt, tpl, delims, tok, build)
    text = templates.render(tpl, t.messages, t.tools, add_generation_prompt=True)
    out.renders += 1
    return prompt_of_text(fam, t, text, tpl, delims, tok, build)


def prompt_of_text(fam: int, t: Turn, text: str, tpl: Template, delims, tok: ExactTokenizer | None,
                   build: Build) -> tuple[TurnPrompt, PromptLayout]:
    """A turn's prompt from its text: laid out and (with an exact tokenizer) its ids kept."""
    rec = _Recording(tok) if tok is not None else None
    lay = layout_of_text(text, delims, rec, tpl.name, build)
    ids = rec.ids if rec is not None else None
    return TurnPrompt(t.index, lay.n_tokens, lay.prompt_spans(), t, fam, text, len(text), "",
                      ids, len(ids) if ids is not None else 0, [] if ids is not None else None), lay


def _derive(fam: int, base: Turn, members: list[tuple[Turn, int]], tpl: Template, delims,
            tok: ExactTokenizer | None, build: Build, out: TurnLayouts, verify: bool) -> list[TurnPrompt] | None:
    whole, lay = _render(fam, base, tpl, delims, tok, build, out)
    if len(members) == 1:
        return [whole]
    text = whole.base
    msgs = base.messages
    a_roles = [i for i, m in enumerate(msgs) if m.get("role") == "assistant"]
    a_chars = (marks_of(text, delims, "assistant") if lay.text_marks is None
               else [c for role, c in lay.text_marks if role == "assistant"])
    a_toks = [s.start for s in lay.spans if s.role == "assistant"]
    if not (len(a_chars) == len(a_toks) == len(a_roles) + 1):
        out.fallbacks.append(f"turns {members[0][0].index}–{members[-1][0].index}: the template does not mark each "
                             "assistant message once; rendered turn by turn")
        return None
    gen_c, gen_t = a_chars[-1], a_toks[-1]
    suffix = text[gen_c:]
    suffix_ids = whole.base_ids[gen_t:] if whole.base_ids is not None else None
    n_suffix = whole.n_tokens - gen_t
    users = whole.base_spans.user_starts
    rank = {i: k for k, i in enumerate(a_roles)}
    prompts = []
    for t, m in members[:-1]:
        k = rank[m]
        cut_t = a_toks[k]
        prompts.append(TurnPrompt(t.index, cut_t + n_suffix, whole.base_spans, t, fam, text, a_chars[k], suffix,
                                  whole.base_ids, cut_t, suffix_ids, True, bisect_left(users, cut_t),
                                  counts=whole.counts))
    prompts.append(whole)
    # check the derivation on a few turns rendered for real
    derived = prompts[:-1]
    shapes = _shapes(msgs)
    for i in _checks(derived, shapes) if verify else ():
        p = derived[i]
        real = templates.render(tpl, p.turn.messages, p.turn.tools, add_generation_prompt=True)
        out.renders += 1
        if real != p.text or (tok is not None and tok.encode(real, add_special=True) != p.ids):
            out.fallbacks.append(f"turn {p.index}: the template renders earlier messages differently as the "
                                 "conversation grows; this family rendered turn by turn")
            return None
    return prompts


def marks_of(text: str, delims: list[templates.Delimiter], role: str) -> list[int]:
    """Where the delimiters of ``role`` start in ``text``, where no delimiter listed before
    them also matches (the server's first-in-list rule), by regex search only."""
    import re

    earlier: set[int] = set()
    found: set[int] = set()
    for d in delims:
        if not d.text:
            continue
        hits = {m.start() for m in re.finditer(re.escape(d.text), text)}
        if d.role == role:
            found |= hits - earlier
        earlier |= hits
    return sorted(found)


def _shapes(msgs: list[dict[str, Any]]) -> list[tuple[str, bool]]:
    """For each message count m, what a template may treat differently at the end of
    ``msgs[:m]``: the last role, and whether an assistant message with reasoning follows the
    last user message (templates that show reasoning only for the current task decide on
    exactly that). One pass over the messages."""
    out: list[tuple[str, bool]] = [("", False)]
    shows = False
    for m in msgs:
        role = m.get("role", "")
        if role == "user":
            shows = False
        elif role == "assistant" and (m.get("reasoning_content") or m.get("reasoning")):
            shows = True
        out.append((role, shows))
    return out


def _checks(derived: list[TurnPrompt], shapes: list[tuple[str, bool]]) -> list[int]:
    """Turns to render for real: the first two of each shape. They are the shortest of their
    kind, so checking costs a fraction of one whole render."""
    seen: dict[tuple[str, bool], int] = {}
    picks = []
    for i, p in enumerate(derived):
        k = shapes[p.turn.n_messages]
        if seen.get(k, 0) < 2:
            seen[k] = seen.get(k, 0) + 1
            picks.append(i)
    return picks


# -- what two prompts share --------------------------------------------------------------

def _first_difference(a, b) -> int:
    """Index of the first differing element of two sequences (C-speed slice compares)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo


class Shared(NamedTuple):
    """(A tuple: a session asks for one per turn and build, and a frozen dataclass costs five times as much.)"""

    n_tokens: int  # tokens the new prompt shares with the old one (the server's common prefix)
    n_chars: int  # characters they share


def shared_prefix(old: TurnPrompt, new: TurnPrompt) -> Shared:
    """The common prefix of two turn prompts, in tokens and characters.

    Same family and the old turn ends where the new one goes on: the old prompt is all
    shared without looking at a character. Otherwise the texts (and ids) are compared.
    """
    known = new._shared  # read once: the two runs may ask from two threads
    if known is not None and known[0] is old:
        return known[1]
    shared = compute_shared_prefix(old, new)
    new._shared = (old, shared)
    return shared


def compute_shared_prefix(old: TurnPrompt, new: TurnPrompt) -> Shared:
    if (old.family == new.family and old.base is new.base and old.cut <= new.cut
            and new.base.startswith(old.suffix, old.cut)):
        n_chars = old.cut + len(old.suffix)  # len(old.text) without building it
        if old.base_ids is None:
            return Shared(old.n_tokens, n_chars)
        if new.base_ids is not None and new.base_ids[old.tcut:old.tcut + len(old.suffix_ids or [])] == old.suffix_ids:
            return Shared(old.n_tokens, n_chars)
    n_a, n_b = old.cut + len(old.suffix), new.cut + len(new.suffix)
    d = _first_difference_of(old.text_head, new.text_head, min(n_a, n_b))
    if old.base_ids is not None and old.suffix_ids is not None and new.base_ids is not None \
            and new.suffix_ids is not None:
        n_ids = min(old.tcut + len(old.suffix_ids), new.tcut + len(new.suffix_ids))
        return Shared(_first_difference_of(old.ids_head, new.ids_head, n_ids), d)
    if d == n_a:
        return Shared(old.n_tokens, d)
    # the estimate has no ids: count the shared text, cut back to a word boundary so that a
    # token spanning the change is not counted as shared
    b = new.text_head(d)
    cut = max(b.rfind(" ", 0, d), b.rfind("\n", 0, d), 0)
    return Shared(min(_count_to(new, b, cut), old.n_tokens, new.n_tokens), d)


def _first_difference_of(head_a, head_b, n: int) -> int:
    """``_first_difference`` of two sequences of at least ``n`` elements given by their heads
    (``head(k)``: the first ``k``), compared on growing heads: prompts of two families differ
    within their first few hundred characters, and building a 500k-character text to find
    that was most of a slot comparison."""
    k = 4096
    while True:
        k = min(k, n)
        d = _first_difference(head_a(k), head_b(k))
        if d < k or k == n:
            return d
        k *= 16


def _count_to(p: TurnPrompt, text: str, cut: int) -> int:
    """The estimate's tokens of ``text[:cut]`` (``text`` is ``p``'s): what ``counts_between(text,
    [cut])`` gives its first part, which is scanned as a text of its own (pieces never cross a
    cut), so only that part is scanned. Kept per family while the cut is inside the base."""
    memo = p.counts if cut <= p.cut else None
    n = memo.get(cut) if memo is not None else None
    if n is None:
        n = counts_between(text, [], end=cut)[0]
        if memo is not None:
            memo[cut] = n
    return n


def server_turn_prompt(turn, st, layouts: TurnLayouts, build) -> tuple[TurnPrompt, PromptLayout]:
    """The turn's prompt as a live server renders and tokenizes it (``st``: its
    ``ServerTokenizer``), added to the run's layouts: the live engines lay turns out this way."""
    text = st.apply_template(turn.messages, turn.tools)
    rec = _Recording(st)
    lay = layout_of_text(text, layouts.delimiters, rec, layouts.template.name, build)
    ids = rec.ids or []
    p = TurnPrompt(turn.index, lay.n_tokens, lay.prompt_spans(), turn, 0, text, len(text), "", ids, len(ids), [])
    layouts.prompts.append(p)
    return p, lay
