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

import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any, Protocol

import orjson

from replayer.core.builds.catalog import Build, parse_build
from replayer.core.engine.schedule import PromptSpans
from replayer.core.errors import ReplayerError
from replayer.core.prompt import templates
from replayer.core.prompt.templates import Delimiter, Template


@dataclass(frozen=True)
class Span:
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

    @property
    def user_starts(self) -> list[int]:
        return [s.start for s in self.spans if s.role == "user"]

    def role_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.spans:
            out[s.role] = out.get(s.role, 0) + 1
        return out

    def prompt_spans(self) -> PromptSpans:
        """What the scheduler needs; user starts at 0 are dropped (they can never break)."""
        starts = tuple(u for u in self.user_starts if 0 < u < self.n_tokens)
        return PromptSpans.of(self.n_tokens, starts, self.n_before_user)

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


_SPECIAL = re.compile(
    r"<\|[^<>|\s]{1,40}\|>|<\|turn>|<turn\|>|</?(?:tool_call|tool_response|think|start_of_turn|end_of_turn|bos|eos)>"
)


@lru_cache(maxsize=1)
def _estimate_table() -> dict[str, float]:
    raw = resources.files("replayer.data").joinpath("estimate_qwen2.json").read_bytes()
    return orjson.loads(raw)["table"]


def piece_class(piece: str) -> str:
    s = piece.lstrip(" ")
    if piece.isspace() or not s:
        return "w"
    if not piece.isascii():
        return "u"
    c = s[0]
    if c.isalpha():
        return "l"
    if c.isdigit():
        return "d"
    return "p"


#: characters per token past the calibrated lengths, per class
_LONG_RATE = {"l": 4.3, "d": 1.0, "p": 3.2, "w": 12.0, "u": 1.4}


#: Qwen2's pre-tokenizer in Python's ``re`` ([^\W\d_] = letters, \d = digits, _ is punctuation)
_PIECE = re.compile(
    r"'(?:[sStTmMdD]|[rR][eE]|[vV][eE]|[lL][lL])|(?:[^\r\n\w]|_)?[^\W\d_]+|\d| ?(?:[^\s\w]|_)+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


@lru_cache(maxsize=200_000)
def _piece_tokens(piece: str) -> float:
    cls = piece_class(piece)
    ln = len(piece.encode("utf-8"))
    v = _estimate_table().get(f"{cls}{ln}")
    return v if v is not None else max(1.0, ln / _LONG_RATE[cls])


class EstimateTokenizer:
    """Fast, deterministic token counts with no model; calibrated on Qwen2's BPE.

    Pieces are found with Qwen2's pre-tokenizer pattern and priced by a table of average
    BPE tokens per (class, length); repeated pieces are priced once.
    """

    name = "estimate"

    def count(self, text: str) -> int:
        if not text:
            return 0
        from collections import Counter

        n = 0.0
        for seg_is_special, seg in split_specials(text):
            if seg_is_special:
                n += 1
                continue
            for piece, k in Counter(_PIECE.findall(seg)).items():
                n += k * _piece_tokens(piece)
        return int(round(n))


def split_specials(text: str) -> list[tuple[bool, str]]:
    out: list[tuple[bool, str]] = []
    pos = 0
    for m in _SPECIAL.finditer(text):
        if m.start() > pos:
            out.append((False, text[pos:m.start()]))
        out.append((True, m.group(0)))
        pos = m.end()
    if pos < len(text):
        out.append((False, text[pos:]))
    return out


def _scan_text(text: str, delims: list[Delimiter]) -> list[tuple[str, int]]:
    """Delimiter matches on the rendered string: at each position the first delimiter in list
    order wins (the token scan's rule, applied to characters)."""
    hits: dict[int, str] = {}
    for d in delims:
        if not d.text:
            continue
        for m in re.finditer(re.escape(d.text), text):
            hits.setdefault(m.start(), d.role)
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
                   template_kwargs: dict | None = None) -> PromptLayout:
    b = parse_build(build) if isinstance(build, str) else build
    if tokenizer.startswith("server:"):
        from replayer.core.prompt.server_tokenizer import server_layout

        return server_layout(tokenizer[len("server:"):], messages, tools, b, template=template)
    tok_exact: ExactTokenizer | None = None
    if tokenizer.startswith("gguf:"):
        from replayer.core.prompt import gguf_tokenizer

        tok_exact = gguf_tokenizer.load(tokenizer[len("gguf:"):])
        if template is None and tok_exact.chat_template:
            template = Template(name=f"gguf:{tok_exact.path.name}", source=tok_exact.chat_template,
                                bos_token=tok_exact.tokens[tok_exact.bos_id] if tok_exact.bos_id is not None else "",
                                eos_token=tok_exact.tokens[tok_exact.eos_id] if tok_exact.eos_id is not None else "")
    elif tokenizer != "estimate":
        raise ReplayerError(f"unknown tokenizer {tokenizer!r}: use estimate, gguf:PATH or server:URL")
    tpl = template or templates.bundled(templates.DEFAULT_TEMPLATE)
    text = templates.render(tpl, messages, tools, add_generation_prompt=True, **(template_kwargs or {}))
    delims = templates.delimiters_for(tpl, b)
    return layout_of_text(text, delims, tok_exact, tpl.name, b)


def layout_of_text(text: str, delims: list[Delimiter], tok: ExactTokenizer | None, template_name: str,
                   b: Build) -> PromptLayout:
    notes: list[str] = []
    # character offsets of the delimiters: the estimate and G0's prefix rule both need them
    text_matches = _scan_text(text, delims) if tok is None or not b.token_space_spans else []
    if tok is not None:
        ids = tok.encode(text, add_special=True)
        n = len(ids)
        delim_ids = [(d.role, tok.encode(d.text, add_special=False)) for d in delims]
        matches = _scan_tokens(ids, delim_ids)
        count = lambda s: len(tok.encode(s, add_special=True))  # noqa: E731 - G0 prefix rule
        name = tok.name
    else:
        est = EstimateTokenizer()
        # token position of each match = estimated tokens of the text before it
        matches = []
        pos_c = 0
        acc = 0
        for role, c in text_matches:
            acc += est.count(text[pos_c:c])
            pos_c = c
            matches.append((role, acc))
        n = acc + est.count(text[pos_c:])
        count = lambda s: est.count(s)  # noqa: E731
        name = "estimate"
    spans = _spans(matches, n)
    n_before_user = None
    if not b.token_space_spans:
        # G0: byte offset of the last user delimiter occurrence, prefix tokenized like the prompt
        last_user_c = max((c for role, c in text_matches if role == "user"), default=-1)
        if last_user_c > 0:
            n_before_user = count(text[:last_user_c])
    if not delims:
        notes.append("the template yields no message delimiters: the server finds no user starts")
    return PromptLayout(n_tokens=n, spans=spans, delimiters=list(delims), tokenizer=name,
                        template=template_name, build=b.label, n_before_user=n_before_user,
                        text_chars=len(text), notes=notes)


