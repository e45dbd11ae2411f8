"""The rendered prompt in token space: its length and where each message span starts.

``compute_layout`` renders the resume request with a chat template, tokenizes it, and
finds message spans the way the server of a given build does (§8): G1+ scan token ids
for the template's delimiter sequences in list order; G0 takes the byte offset of the
last user delimiter and counts the tokens of that prefix.

Three tokenizers stand behind one call: ``estimate`` (offline, no model: special markers
count one token each, other text by a table calibrated on a real BPE vocabulary),
``gguf:PATH`` (exact, from the model's vocabulary) and ``server:URL`` (exact, from a
running llama-server's ``/apply-template`` and ``/tokenize``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import orjson

from replayer.core.builds.catalog import Build, parse_build
from replayer.core.errors import ReplayerError
from replayer.core.prompt import templates
from replayer.core.prompt.chunked_text import ChunkedText
from replayer.core.prompt.templates import Delimiter, Template
from replayer.core.runspec import PromptSpans


class Span(NamedTuple):
    """One message span in token space (a tuple: thousands are made per layout)."""

    role: str
    start: int
    length: int


@dataclass
class PromptLayout:
    n_tokens: int
    spans: list[Span]
    delimiters: list[Delimiter]
    tokenizer: str
    template: str
    build: str
    n_before_user: int | None = None  # G0 only
    text_chars: int = 0
    notes: list[str] = field(default_factory=list)
    text: str | None = None  # the rendered prompt, when asked for (``keep_text``)
    # (role, character offset) of each delimiter, when the layout scanned the text for them (the
    # estimate, G0): a session's turn prompts cut the whole prompt there and need not scan again
    text_marks: list[tuple[str, int]] | None = field(default=None, repr=False, compare=False)
    _prompt_spans: PromptSpans | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def user_starts(self) -> list[int]:
        return [s.start for s in self.spans if s.role == "user"]

    def role_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.spans:
            out[s.role] = out.get(s.role, 0) + 1
        return out

    def prompt_spans(self) -> PromptSpans:
        """What the scheduler needs; user starts at 0 are dropped (they can never break).

        Kept after the first call: a layout is not changed once computed, and each replay
        schedules it once per run.
        """
        if self._prompt_spans is None:
            starts = tuple(u for u in self.user_starts if 0 < u < self.n_tokens)
            self._prompt_spans = PromptSpans.of(self.n_tokens, starts, self.n_before_user)
        return self._prompt_spans

    def to_dict(self) -> dict[str, Any]:
        return {
            "n_tokens": self.n_tokens,
            "user_starts": self.user_starts,
            "spans": [{"role": s.role, "start": s.start, "length": s.length} for s in self.spans],
            "delimiters": [{"role": d.role, "text": d.text} for d in self.delimiters],
            "tokenizer": self.tokenizer,
            "template": self.template,
            "build": self.build,
            "n_before_user": self.n_before_user,
        }

    def to_json(self) -> bytes:
        return orjson.dumps(self.to_dict())


# -- tokenizers ---------------------------------------------------------------------------

class ExactTokenizer(Protocol):
    name: str

    def encode(self, text: str, add_special: bool = True) -> list[int]: ...


def scan_text(text: str | ChunkedText, delims: list[Delimiter]) -> list[tuple[str, int]]:
    """Delimiter matches on the rendered string: at each position the first delimiter in list
    order wins (the token scan's rule, applied to characters). Each delimiter's matches are
    ``re.finditer``'s of the literal: leftmost, not overlapping (``find`` on from each end)."""
    hits: dict[int, str] = {}
    for d in delims:
        if not d.text:
            continue
        pos = text.find(d.text)
        while pos >= 0:
            hits.setdefault(pos, d.role)
            pos = text.find(d.text, pos + len(d.text))
    # a later delimiter in the list must not win where an earlier one also matches
    out = []
    for pos in sorted(hits):
        for d in delims:
            if d.text and text.startswith(d.text, pos):
                out.append((d.role, pos))
                break
    return out


def _scan_tokens(ids: list[int], delim_ids: list[tuple[str, list[int]]]) -> list[tuple[str, int]]:
    """§8.2 split: at each i try delimiters in list order; first full match records (role, i)."""
    firsts: dict[int, list[tuple[str, list[int]]]] = {}
    for role, seq in delim_ids:
        if seq:
            firsts.setdefault(seq[0], []).append((role, seq))
    out = []
    for i, t in enumerate(ids):
        cands = firsts.get(t)
        if not cands:
            continue
        for role, seq in cands:
            if ids[i:i + len(seq)] == seq:
                out.append((role, i))
                break
    return out


def _spans(matches: list[tuple[str, int]], n_tokens: int) -> list[Span]:
    spans = []
    for k, (role, start) in enumerate(matches):
        end = matches[k + 1][1] if k + 1 < len(matches) else n_tokens
        spans.append(Span(role, start, end - start))
    return spans


# -- the entry point ---------------------------------------------------------------------

def compute_layout(messages: list[dict], tools: list[dict] | None, *, template: Template | None = None,
                   tokenizer: str = "estimate", build: Build | str = "G2b",
                   template_kwargs: dict | None = None, keep_text: bool = False) -> PromptLayout:
    b = parse_build(build) if isinstance(build, str) else build
    if tokenizer.startswith("server:"):
        from replayer.core.prompt.server_tokenizer import ServerTokenizer  # httpx: only when asked

        return server_layout(ServerTokenizer(tokenizer[len("server:"):]), messages, tools, b, template=template, keep_text=keep_text)
    tok_exact, tpl = offline_tokenizer(tokenizer, template)
    # a GGUF alone is a text-only server (a projector is a separate --mmproj file): images refused
    chunks = templates.render_chunks(tpl, messages, tools, add_generation_prompt=True, build_number=b.effective_number,
                                     allow_media=tok_exact is None, **(template_kwargs or {}))
    # the estimate reads the chunks as they are: joined, one emoji made the prompt 4 bytes a
    # character (issue 24); an exact tokenizer, and a caller keeping the text, need the string
    text: str | ChunkedText = "".join(chunks) if tok_exact is not None or keep_text else ChunkedText(chunks)
    del chunks
    delims = templates.delimiters_for(tpl, b)
    lay = layout_of_text(text, delims, tok_exact, tpl.name, b)
    if keep_text:
        lay.text = text
    return lay


def prefetch(tokenizer: str, template: Template | None) -> None:
    """Start what a ``gguf:`` layout waits for before the caller reads its session: the
    sandbox's render worker (for the GGUF's own, untrusted template) and the cached tokenizer,
    loading in the background. Best effort: errors surface where the layout needs them."""
    if not tokenizer.startswith("gguf:"):
        return
    if template is None or not template.trusted:
        templates.sandbox.prestart()
    from replayer.core.prompt import gguf_tokenizer

    try:
        gguf_tokenizer.load(tokenizer[len("gguf:"):])
    except ReplayerError:
        pass  # offline_tokenizer raises it again, with the session's context


def offline_tokenizer(tokenizer: str, template: Template | None) -> tuple[ExactTokenizer | None, Template]:
    """The exact tokenizer (None for the estimate) and the template to render with: a GGUF's
    own chat template unless one is given."""
    tok_exact: ExactTokenizer | None = None
    if tokenizer.startswith("gguf:"):
        from replayer.core.prompt import gguf_tokenizer

        tok_exact = gguf_tokenizer.load(tokenizer[len("gguf:"):])
        if template is None and tok_exact.chat_template:
            template = Template(name=f"gguf:{tok_exact.path.name}", source=tok_exact.chat_template,
                                bos_token=tok_exact.tokens[tok_exact.bos_id] if tok_exact.bos_id is not None else "",
                                eos_token=tok_exact.tokens[tok_exact.eos_id] if tok_exact.eos_id is not None else "",
                                add_bos=tok_exact.add_bos)
    elif tokenizer != "estimate":
        raise ReplayerError(f"unknown tokenizer {tokenizer!r}: use estimate, gguf:PATH or server:URL")
    return tok_exact, template or templates.bundled(templates.DEFAULT_TEMPLATE)


def layout_of_text(text: str | ChunkedText, delims: list[Delimiter], tok: ExactTokenizer | None, template_name: str,
                   b: Build) -> PromptLayout:
    notes: list[str] = []
    # character offsets of the delimiters: the estimate and G0's prefix rule both need them
    scanned = tok is None or not b.token_space_spans
    text_matches = scan_text(text, delims) if scanned else []
    if tok is not None:
        ids = tok.encode(text, add_special=True)
        n = len(ids)
        delim_ids = [(d.role, tok.encode(d.text, add_special=False)) for d in delims]
        matches = _scan_tokens(ids, delim_ids)
        count_prefix = lambda c: len(tok.encode(text[:c], add_special=True))  # an exact tokenizer needs the text
        name = tok.name
    else:
        from replayer.core.prompt.estimate import EstimateTokenizer, counts_between  # numpy: estimate only

        est = EstimateTokenizer()
        # token position of each match = estimated tokens of the text before it, each part
        # rounded on its own
        parts = counts_between(text, [c for _, c in text_matches])
        matches = []
        acc = 0
        for (role, _), k in zip(text_matches, parts):
            acc += k
            matches.append((role, acc))
        n = acc + parts[-1]
        count_prefix = lambda c: est.count(text, end=c)  # no copy of the prefix
        name = "estimate"
    spans = _spans(matches, n)
    n_before_user = None
    if not b.token_space_spans:
        # G0: byte offset of the last user delimiter occurrence, prefix tokenized like the prompt
        last_user_c = max((c for role, c in text_matches if role == "user"), default=-1)
        if last_user_c > 0:
            n_before_user = count_prefix(last_user_c)
    if not delims:
        notes.append("the template yields no message delimiters: the server finds no user starts")
    return PromptLayout(n_tokens=n, spans=spans, delimiters=list(delims), tokenizer=name,
                        template=template_name, build=b.label, n_before_user=n_before_user,
                        text_chars=len(text), notes=notes, text_marks=text_matches if scanned else None)


class TemplatingTokenizer(ExactTokenizer, Protocol):
    """A tokenizer that also renders (a running server: ``ServerTokenizer``)."""

    def template(self) -> Template: ...

    def apply_template(self, messages: list[dict], tools: list[dict] | None) -> str: ...


def server_layout(st: TemplatingTokenizer, messages: list[dict], tools: list[dict] | None, build: Build,
                  template: Template | None = None, keep_text: bool = False) -> PromptLayout:
    """The layout a running server makes of a request: its own template and tokenizer."""
    tpl = template or st.template()
    text = st.apply_template(messages, tools)
    lay = layout_of_text(text, templates.delimiters_for(tpl, build), st, tpl.name, build)
    if keep_text:
        lay.text = text
    return lay
