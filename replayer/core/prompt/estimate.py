"""The ``estimate`` tokenizer: token counts with no model, calibrated on Qwen2's BPE.

Text is cut into the pieces Qwen2's pre-tokenizer makes (the regex ``PIECE``), and each
piece is priced by a table of average BPE tokens per (class, UTF-8 length). Special
markers such as ``<|im_start|>`` count one token each.

Running ``PIECE`` with Python's ``re`` over a 128k-token prompt took longer than importing
the session did, so ``scan`` finds the same pieces with array operations instead: it
classes every character (letter, digit, punctuation, space, newline), and reads piece
starts off the class of each run and of its neighbours. The rules below are what the
regex's ordered alternatives do at each position; ``tests/test_estimate.py`` checks the
two agree piece for piece on every sample session.
"""

from __future__ import annotations

import bisect
import re
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING

import numpy as np
from pydantic import BaseModel

if TYPE_CHECKING:
    from replayer.core.prompt.chunked_text import ChunkedText

#: special markers, one token each
SPECIAL = re.compile(
    r"<\|[^<>|\s]{1,40}\|>|<\|turn>|<turn\|>|</?(?:tool_call|tool_response|think|start_of_turn|end_of_turn|bos|eos)>"
)

#: Qwen2's pre-tokenizer in Python's ``re`` ([^\W\d_] = letters, \d = digits, _ is punctuation);
#: ``scan`` reproduces it, this is its reference
PIECE = re.compile(
    r"'(?:[sStTmMdD]|[rR][eE]|[vV][eE]|[lL][lL])|(?:[^\r\n\w]|_)?[^\W\d_]+|\d| ?(?:[^\s\w]|_)+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

def piece_class(piece: str) -> str:
    """The price class of one piece, as the table was learned (``scan`` computes the same
    with arrays; this is its reference, and the calibration script's)."""
    s = piece.lstrip(" ")
    if piece.isspace() or not s:
        return "w"
    if not piece.isascii():
        return "u"
    if s[0].isalpha():
        return "l"
    if s[0].isdigit():
        return "d"
    return "p"


# character classes; END marks "no character" (a segment edge)
L, D, P, S, N, END = 0, 1, 2, 3, 4, -1
#: price classes of the table: letters, digit, punctuation, whitespace, non-ASCII
PRICE_CLASSES = "ldpwu"
#: characters per token past the calibrated lengths, per price class
LONG_RATE = {"l": 4.3, "d": 1.0, "p": 3.2, "w": 12.0, "u": 1.4}
_MAX_LEN = 512  # longer pieces are priced by LONG_RATE directly
#: price class (index into PRICE_CLASSES) of a piece led by a character of class L, D, P, S, N
_PRICE_CLASS = np.array([0, 1, 2, 3, 3], dtype=np.int8)


def _class_of(ch: str) -> int:
    if ch in "\r\n":
        return N
    if ch.isspace():
        return S
    if ch.isdecimal():
        return D
    if ch.isalnum():  # re's \w less \d and _
        return L
    return P


_ASCII = np.array([_class_of(chr(i)) for i in range(128)], dtype=np.int8)


class PriceTable(BaseModel):
    """``data/estimate_qwen2.json``: tokens per pre-token piece by class and UTF-8 length
    (``l3`` = a 3-byte letter run), with how it was measured."""

    vocabulary: str
    method: str
    corpus: str = ""
    table: dict[str, float]


@lru_cache(maxsize=1)
def price_table() -> np.ndarray:
    """prices[class, utf-8 length] for lengths below ``_MAX_LEN``."""
    raw = resources.files("replayer.data").joinpath("estimate_qwen2.json").read_bytes()
    table = PriceTable.model_validate_json(raw).table
    prices = np.empty((len(PRICE_CLASSES), _MAX_LEN), dtype=np.float64)
    for k, cls in enumerate(PRICE_CLASSES):
        for ln in range(_MAX_LEN):
            v = table.get(f"{cls}{ln}")
            prices[k, ln] = v if v is not None else max(1.0, ln / LONG_RATE[cls])
    return prices


def _code_points(text: str) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """(code points, classes, utf-8 bytes per char, non-ASCII mask) of every character; the
    last two are None for ASCII text."""
    if text.isascii():
        cps = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
        return cps, _ASCII[cps], None, None
    cps = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    wide = cps >= 128
    cls = np.empty(len(cps), dtype=np.int8)
    cls[~wide] = _ASCII[cps[~wide]]
    uniq, inv = np.unique(cps[wide], return_inverse=True)
    cls[wide] = np.array([_class_of(chr(c)) for c in uniq.tolist()], dtype=np.int8)[inv]
    nbytes = wide.astype(np.uint8)  # 1 byte a character, not 8: summed in place by _prices
    nbytes += 1
    nbytes += cps >= 0x800
    nbytes += cps >= 0x10000
    return cps, cls, nbytes, wide


def scan(text: str, cuts: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Piece start offsets and token prices of ``text``; pieces never cross a cut offset.

    Cuts are where the caller counts separately (message delimiters): each part is
    tokenized as if it were a text of its own, as counting the parts one by one would.
    The pre-tokenizer's alternatives are applied in stages, each marking piece starts.
    """
    n = len(text)
    if n == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    cps, cls, nbytes, wide = _code_points(text)
    sp_start, sp_end = _specials(text)
    edges = [np.zeros(1, dtype=np.int64), sp_start, sp_end]
    if cuts is not None and len(cuts):
        edges.append(np.asarray(cuts, dtype=np.int64))
    pc, nc = _neighbours(cls, np.concatenate(edges), n)
    run_start = cls != pc
    start = cls == D  # \d: one digit per piece
    p_spaced, l_run, lone_p, prefixed = _words(start, cps, cls, pc, run_start)
    _whitespace(start, cls, pc, nc)
    start[l_run[prefixed]] = False
    start[np.flatnonzero(p_spaced)] = False
    _contractions(start, cps, cls, pc, l_run[lone_p], n)
    if len(sp_start):  # a special marker is one piece of one token: drop what its characters started inside it
        mark = np.zeros(n + 1, dtype=np.int8)
        mark[sp_start + 1] = 1  # markers never overlap and are longer than one character
        mark[sp_end] -= 1
        start &= np.cumsum(mark[:n], dtype=np.int8) == 0
    starts = np.flatnonzero(start)
    price = _prices(starts, cps, cls, nbytes, wide, n)
    if len(sp_start):
        price[np.searchsorted(starts, sp_start)] = 1.0
    return starts, price


def _neighbours(cls: np.ndarray, edge: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Class of the previous and next character in the same part, END across a part's edge."""
    pc = np.empty(n, dtype=np.int8)
    pc[1:] = cls[:-1]
    pc[edge[edge < n]] = END
    nc = np.empty(n, dtype=np.int8)
    nc[:-1] = cls[1:]
    nc[-1] = END
    nc[edge[edge > 0] - 1] = END
    return pc, nc


def _words(start: np.ndarray, cps: np.ndarray, cls: np.ndarray, pc: np.ndarray, run_start: np.ndarray):
    """Punctuation runs are one piece and take a literal space just before them; letter runs are one
    piece and take one space or one unclaimed punctuation just before them. Marks their starts;
    returns what the later stages need (spaced punctuation, letter runs, their prefixes)."""
    p_run = cls == P
    p_run &= run_start
    start |= p_run
    p_spaced = pc == S
    p_spaced[1:] &= cps[:-1] == 32
    p_spaced &= p_run
    l_mask = cls == L
    l_mask &= run_start
    l_run = np.flatnonzero(l_mask)
    before = pc[l_run]
    lone_p = before == P
    lone_p[lone_p] = run_start[l_run[lone_p] - 1] & ~p_spaced[l_run[lone_p] - 1]
    prefixed = (before == S) | lone_p
    start[l_run] = True
    return p_spaced, l_run, lone_p, prefixed


def _whitespace(start: np.ndarray, cls: np.ndarray, pc: np.ndarray, nc: np.ndarray) -> None:
    """Whitespace runs: up to the last newline is one piece (\\s*[\\r\\n]+), after that the last
    space goes to what follows and the rest is one piece (\\s+(?!\\S)), or all of it at a part's
    end; newlines right after punctuation belong to it ([\\r\\n]* of that alternative)."""
    ws = cls >= S  # S or N (END is negative)
    w0 = np.flatnonzero(ws > (pc >= S))
    w1 = np.flatnonzero(ws > (nc >= S)) + 1
    if not len(w0):
        return
    is_n = cls == N
    n_at = np.flatnonzero(is_n)
    n_run_end = np.flatnonzero(is_n > (nc == N)) + 1
    after_p = (pc[w0] == P) & is_n[w0]
    a0 = w0.copy()
    a0[after_p] = n_run_end[np.searchsorted(n_run_end, w0[after_p], side="right")]
    a0 = np.minimum(a0, w1)
    last_n = np.full(len(w1), -1)
    if len(n_at):
        k_last = np.searchsorted(n_at, w1 - 1, side="right") - 1
        last_n = np.where(k_last >= 0, n_at[np.maximum(k_last, 0)], -1)
    nl = last_n >= a0
    start[a0[nl]] = True
    t0 = np.where(nl, last_n + 1, a0)
    k = w1 - t0
    y = nc[w1 - 1]
    whole = (k > 0) & (y == END)
    split = (k > 0) & (y != END)
    start[t0[whole | (split & (k >= 2))]] = True
    start[w1[split] - 1] = True


def _contractions(start: np.ndarray, cps: np.ndarray, cls: np.ndarray, pc: np.ndarray, lone: np.ndarray,
                  n: int) -> None:
    """An unclaimed lone ' before letters makes "'s", "'t", "'re"… (the alternative tried first)."""
    apos = lone[cps[lone - 1] == 39]
    if not len(apos):
        return
    c1 = cps[apos] | 0x20
    nxt = np.minimum(apos + 1, n - 1)
    in_run = (apos + 1 < n) & (cls[nxt] == L) & (pc[nxt] != END)
    c2 = cps[nxt] | 0x20
    one = np.isin(c1, [ord(c) for c in "stmd"])
    two = ~one & in_run & (((c1 == ord("r")) | (c1 == ord("v"))) & (c2 == ord("e")) | (c1 == ord("l")) & (c2 == ord("l")))
    j = apos + np.where(one, 1, 2)
    jj = np.minimum(j, n - 1)
    rest = (one | two) & (j < n) & (cls[jj] == L) & (pc[jj] != END)
    start[j[rest]] = True


def _specials(text: str) -> tuple[np.ndarray, np.ndarray]:
    """Start and end offsets of the special markers: the spans of their matches (markers are
    few; ``split`` was as fast but copied the whole text into its pieces)."""
    spans = np.fromiter((x for m in SPECIAL.finditer(text) for x in m.span()), dtype=np.int64)
    return spans[0::2], spans[1::2]


def _prices(starts: np.ndarray, cps: np.ndarray, cls: np.ndarray, nbytes: np.ndarray | None, wide: np.ndarray | None, n: int) -> np.ndarray:
    # offsets and lengths in int32 when they fit (a block's do: half the bytes of int64)
    idx = np.int32 if 4 * n < np.iinfo(np.int32).max else np.int64
    starts = starts.astype(idx)
    ends = np.empty_like(starts)
    ends[:-1] = starts[1:]
    ends[-1] = n
    length = ends - starts
    if nbytes is None:
        ln = length
    else:
        cb = np.empty(n + 1, dtype=idx)  # the running sum written in place, not copied
        cb[0] = 0
        np.cumsum(nbytes, dtype=idx, out=cb[1:])
        ln = cb[ends]
        ln -= cb[starts]
        del cb
    # a piece led by one space is classed by what follows the space (" foo" is letters)
    second = cls[np.minimum(starts + 1, n - 1)]
    led = (cps[starts] == 32) & (length > 1) & (second < S)
    head = np.where(led, second, cls[starts])
    del second, led
    pclass = _PRICE_CLASS[head]
    white = pclass == 3
    white &= cls[ends - 1] >= S  # whitespace to the end; "\tfoo" is priced as punctuation
    pclass[(pclass == 3) & ~white] = 2
    if wide is not None:  # a non-ASCII character makes the piece's UTF-8 longer than its characters
        pclass[(ln > length) & ~white] = 4
    table = price_table()
    price = table[pclass, np.minimum(ln, _MAX_LEN - 1)]
    long = ln >= _MAX_LEN
    if long.any():
        rate = np.array([LONG_RATE[c] for c in PRICE_CLASSES])
        price[long] = np.maximum(1.0, ln[long] / rate[pclass[long]])
    return price


#: characters per scan: parts are scanned in blocks of about this size, cut where a part
#: ends, so the arrays stay in cache (whole-prompt arrays cost more in page faults than in
#: work), and memory stays small whatever the prompt: 8K characters peak at ~0.6 MB on a
#: 2.36 M-character 4-byte text (32K: 1.9 MB, 131,072: 5.6 MB) for ~40 % more CPU than 32K,
#: ~6 ms on a 460K-character prompt; the advice lays a prompt out beside the replay's, so the
#: scan's arrays were 0.5 MB of a 951 KB pi session's 5.2 MB peak (docs/benchmarks.md, issue 24)
BLOCK = 8192
#: a shorter text is scanned in ~16 blocks of at least this size: the scan's arrays (~50 B a
#: character of a block) stay near 3 B a character of the text whatever its length (a 70K-
#: character prompt: 0.9 MB in one block, ~0.16 MB in 16), for a few ms
MIN_BLOCK = 4096
#: a part longer than a block by this much is cut inside at a safe place (the first after
#: the block's nominal end)
_SAFE_CUT_WINDOW = 4096
#: a letter, a space, a letter: the space always starts a piece (" word") and the piece
#: before always ends at the letter, so scanning the two sides apart gives the same pieces
_SAFE_CUT = re.compile(r"(?<=[A-Za-z]) (?=[A-Za-z])")


def _safe_cut(text: str | ChunkedText, lo: int, hi: int) -> int | None:
    if not isinstance(text, str):
        return text.search_start(_SAFE_CUT, lo, hi)
    m = _SAFE_CUT.search(text, lo, hi)
    return m.start() if m else None


def counts_between(text: str | ChunkedText, cuts: list[int], end: int | None = None) -> list[int]:
    """Estimated tokens of each part of ``text`` cut at the (sorted) ``cuts``, each rounded
    on its own as counting the parts one by one would; ``end``: of ``text[:end]``, without
    that copy (nothing past ``end`` is read: a block's scan and its safe cut stop there).
    ``text`` may be a render's chunks (``ChunkedText``): only its blocks are joined.

    A piece belongs to the part its first character is in. Blocks end at a cut when one is
    near, else (inside one long message) at a safe cut (``_SAFE_CUT``). The running sum of
    prices is carried from block to block, and only its value where each part starts is kept,
    so nothing proportional to the prompt is kept beyond the text itself — and the sums are
    the very floats a cumulative sum over the whole prompt gives (ties at .5 round alike)."""
    n = len(text) if end is None else min(end, len(text))
    block = min(BLOCK, max(MIN_BLOCK, n // 16))
    bounds = np.asarray([0, *cuts, n], dtype=np.int64)
    at_bound = np.zeros(len(bounds))  # running price sum before each bound's first piece
    inner = [c for c in cuts if 0 < c < n]
    carry = 0.0
    a, k = 0, 0
    tail = False  # the rest of a long part: its block ends where the part ends
    while a < n:
        # the first cut at least BLOCK characters on ends this block; parts are independent
        j = k if tail else bisect.bisect_left(inner, a + block, lo=k)
        b = inner[j] if j < len(inner) else n
        nxt = j + 1 if j < len(inner) else j
        tail = False
        if b - a > block + _SAFE_CUT_WINDOW:  # one long part: end the block inside it
            c = _safe_cut(text, a + block, b)  # the first safe cut on, however far
            if c is not None:
                b, nxt, tail = c, j, True
        local = np.asarray(inner[k:j], dtype=np.int64) - a  # all before a + block ≤ b
        st, pr = scan(text[a:b], local)
        csum = np.cumsum(np.concatenate(([carry], pr)))
        lo, hi = np.searchsorted(bounds, [a, b])  # the bounds this block places
        at_bound[lo:hi] = csum[np.searchsorted(st, bounds[lo:hi] - a)]
        carry = float(csum[-1])
        a, k = b, nxt
    at_bound[np.searchsorted(bounds, n):] = carry
    return np.round(np.diff(at_bound)).astype(np.int64).tolist()


class EstimateTokenizer:
    """Fast, deterministic token counts with no model (see the module docstring)."""

    name = "estimate"

    def count(self, text: str | ChunkedText, end: int | None = None) -> int:
        """The text's estimated tokens (``end``: of ``text[:end]``, not copied: G0 counts the
        prompt up to its last user, most of a 4-byte prompt), through the blocked scan: a few MB
        whatever the text (a scan of the whole text held ~57 B a character)."""
        if not text or end == 0:
            return 0
        return counts_between(text, [], end)[0]
