"""Exact tokenization from a model's GGUF, without loading weights.

The vocabulary, merges, token types and pre-tokenizer name are read with the bounded
``gguf_kv`` reader; the tokenizer is assembled from the ``tokenizers`` library: byte-level BPE behind the same
pre-tokenizer regexes llama.cpp uses for that ``tokenizer.ggml.pre`` (``pre_tokenizers``), or SentencePiece-style
BPE (merges ranked by score, byte fallback) for ``llama``/SPM vocabularies. Control and
user-defined tokens are parsed as single tokens, as the server does with
``parse_special``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from replayer.core.errors import ReplayerError

# kept for the tiny models' trainer: llama.cpp's qwen2 split (the table has them all)
QWEN2_PRETOKENIZER = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

#: ``progress(stage, done, total)`` of a first build (a cached tokenizer reports nothing)
Progress = Callable[[str, int, int], None]


def _silent(stage: str, done: int, total: int) -> None:
    pass


TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED, TOKEN_BYTE = 1, 2, 3, 4, 5, 6


def gguf_field(reader: Any, key: str, default: Any = None) -> Any:
    f = reader.fields.get(key)
    if f is None:
        return default
    try:
        if len(f.types) == 2 and f.types[1] == 8:  # array of strings: skip the slow generic path
            return [bytes(f.parts[i]).decode("utf-8", "replace") for i in f.data]
        if len(f.types) == 2 and f.types[0] == 9:  # array of numbers
            import numpy as np

            return np.concatenate([f.parts[i] for i in f.data]).tolist() if f.data else []
        return f.contents()
    except Exception:  # pragma: no cover - malformed field
        return default


class GGUFTokenizer:
    """``encode(text, add_special)`` as llama-server's ``/tokenize`` does (parse_special on).

    The KV header is read by the bounded :mod:`gguf_kv` reader; the built ``tokenizers``
    object is cached on disk by the vocabulary's content hash (:mod:`tokenizer_cache`), so
    only the first use of a vocabulary pays for building it. ``progress(stage, done, total)``
    hears about that first build (the app shows it).
    """

    def __init__(self, path: str | Path, extra_specials: tuple[str, ...] = (),
                 progress: Progress | None = None, background: bool = False) -> None:
        from replayer.core.prompt import gguf_index, pre_tokenizers, tokenizer_cache

        self.path = Path(path).expanduser()
        self.name = f"gguf:{self.path}"
        kv = gguf_index.read(self.path)  # a second read skips the walk of its strings
        model = kv.get("tokenizer.ggml.model")
        tokens = kv.lazy_strings("tokenizer.ggml.tokens")
        if not tokens:
            raise ReplayerError(f"{self.path} has no tokenizer vocabulary")
        self.model = model
        self.pre = kv.get("tokenizer.ggml.pre", "default")
        self.chat_template = kv.get("tokenizer.chat_template")
        self.bos_id = kv.get("tokenizer.ggml.bos_token_id")
        self.eos_id = kv.get("tokenizer.ggml.eos_token_id")
        self.tokens: Any = tokens
        self._spm = model == "llama"
        if model == "gpt2":
            pre = pre_tokenizers.lookup(self.pre, self.path.name)
            pre_tokenizers.require_supported(pre, self.path.name)
            self.pre_tokenizer = pre
            self.add_bos = bool(kv.get("tokenizer.ggml.add_bos_token", bool(pre.add_bos)))
        elif model == "llama":
            self.add_bos = bool(kv.get("tokenizer.ggml.add_bos_token", True))
        else:
            raise ReplayerError(f"tokenizer model {model!r} of {self.path.name} is not supported yet")
        if extra_specials:  # a model's GGUF adds tokens its base vocabulary lacks (Qwen2.5's <tool_call>…)
            known = set(tokens)
            self.tokens = list(tokens) + [t for t in dict.fromkeys(extra_specials) if t not in known]
        key = tokenizer_cache.key(kv, extra_specials)
        gguf_index.save(kv)  # after the key: the vocabulary's hash is kept with the walk
        self.from_cache = tokenizer_cache.entry(key).is_file()
        if self.from_cache and background:
            # loading a cached 152k vocabulary is ~0.5 s of the tokenizers library, all of it
            # holding the GIL: in a worker process it loads on another core while the caller
            # imports, reads its session and renders (tokenizer_worker); a worker that cannot
            # gives way to the in-process load, which rebuilds a damaged entry
            from replayer.core.prompt.tokenizer_worker import RemoteTokenizer

            self._tok: Any = RemoteTokenizer(tokenizer_cache.entry(key), lambda: self._load_or_build(
                key, gguf_index.read(self.path), extra_specials, progress))
        else:
            self._tok = self._load_or_build(key, kv, extra_specials, progress)

    def _load_or_build(self, key: str, kv: Any, extra_specials: tuple[str, ...], progress: Progress | None) -> Any:
        from replayer.core.prompt import tokenizer_cache

        tok = tokenizer_cache.load(key)
        if tok is None:
            self.from_cache = False
            tok = self._build(kv, extra_specials, progress or _silent)
            tokenizer_cache.store(key, tok)
            (progress or _silent)("ready", 4, 4)
        return tok

    def _build(self, kv: Any, extra_specials: tuple[str, ...], progress: Progress) -> Any:
        from tokenizers import AddedToken

        n = len(self.tokens)
        progress("reading the vocabulary", 0, 4)
        tokens = kv.get("tokenizer.ggml.tokens")
        types = kv.get("tokenizer.ggml.token_type") or [TOKEN_NORMAL] * len(tokens)
        vocab = {t: i for i, t in enumerate(tokens)}
        specials = [t for t, ty in zip(tokens, types) if ty in (TOKEN_CONTROL, TOKEN_USER_DEFINED)]
        for extra in extra_specials:
            if extra not in vocab:
                vocab[extra] = len(tokens)
                tokens.append(extra)
            specials.append(extra)
        progress(f"building the merges of {n:,} tokens", 1, 4)
        try:
            if self._spm:
                tok = self._spm_tokenizer(kv, vocab, tokens, types, progress)
            else:
                tok = self._bpe_tokenizer(kv, vocab, progress)
        except ReplayerError:
            raise
        except Exception as exc:  # the tokenizers library refuses what llama.cpp would refuse too
            raise ReplayerError(f"{self.path.name}: its vocabulary and merges do not fit: {exc}") from None
        tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
        progress("saving the tokenizer for next time", 3, 4)
        return tok

    def _bpe_tokenizer(self, kv: Any, vocab: dict[str, int], progress: Progress) -> Any:
        """A byte-level BPE (``gpt2`` vocabularies) split first by the pre-tokenizer's regexes,
        as ``llm_tokenizer_bpe`` does for ``tokenizer.ggml.pre``."""
        from tokenizers import Tokenizer, decoders, models

        from replayer.core.prompt import pre_tokenizers

        merges_raw = kv.get("tokenizer.ggml.merges")
        if not merges_raw:
            raise ReplayerError(f"{self.path}: BPE vocabulary without merges")
        merges = [tuple(m.split(" ", 1)) for m in merges_raw]
        progress(f"building the tokenizer ({len(merges):,} merges)", 2, 4)
        tok = Tokenizer(models.BPE(vocab, merges, fuse_unk=False, ignore_merges=self.pre_tokenizer.ignore_merges))
        tok.pre_tokenizer = pre_tokenizers.split(self.pre_tokenizer)
        tok.decoder = decoders.ByteLevel()
        return tok

    def _spm_tokenizer(self, kv: Any, vocab: dict[str, int], tokens: list[str], types: list[int],
                       progress: Progress) -> Any:
        """A SentencePiece vocabulary (``llama``) as a BPE over its scores with byte fallback:
        the same pieces llama.cpp's ``llm_tokenizer_spm`` picks."""
        from tokenizers import Tokenizer, decoders, models, normalizers

        scores = kv.get("tokenizer.ggml.scores") or [0.0] * len(tokens)
        merges = _spm_merges(tokens, scores, types)
        progress(f"building the tokenizer ({len(merges):,} merges)", 2, 4)
        tok = Tokenizer(models.BPE(vocab, merges, unk_token=tokens[0] if types[0] == TOKEN_UNKNOWN else None,
                                   fuse_unk=True, byte_fallback=True))
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        tok.pre_tokenizer = None
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
        return tok

    def encode(self, text: str, add_special: bool = True) -> list[int]:
        if self._spm:
            ids = self._encode_spm(text)
        else:
            ids = self._tok.encode(text, add_special_tokens=False).ids
        if add_special and self.add_bos and self.bos_id is not None:
            ids = [self.bos_id] + ids
        return ids

    def _encode_spm(self, text: str) -> list[int]:
        # llama.cpp adds the leading space only at the start of the text, not after specials
        enc = self._tok.encode(text, add_special_tokens=False)
        return enc.ids

    def count(self, text: str) -> int:
        return len(self.encode(text, add_special=False))

    def piece(self, token_id: int) -> str:
        return self.tokens[token_id]


def _spm_merges(tokens: list[str], scores: list[float], types: list[int]) -> list[tuple[str, str]]:
    """SentencePiece BPE as ranked merges: a merge's rank follows its result's score."""
    vocab = {t: i for i, t in enumerate(tokens) if types[i] in (TOKEN_NORMAL, TOKEN_UNUSED)}
    merges: list[tuple[float, int, str, str]] = []
    for piece, pid in vocab.items():
        for i in range(1, len(piece)):
            left, right = piece[:i], piece[i:]
            if left in vocab and right in vocab:
                merges.append((-scores[pid], pid, left, right))
    merges.sort()
    return [(a, b) for _, _, a, b in merges]


#: Added tokens every Qwen2.5/Qwen3.x model GGUF carries on top of the Qwen2 base vocabulary.
QWEN_ADDED_TOKENS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>")


_loaded: dict[tuple[str, tuple[str, ...]], GGUFTokenizer] = {}


def needs_build(path: str, extra_specials: tuple[str, ...] = ()) -> bool:
    """Whether loading this GGUF's tokenizer builds it (no cache entry yet, not loaded in this
    process): the app then builds it on a worker thread and shows the progress."""
    from replayer.core.prompt import gguf_index, tokenizer_cache

    if (path, extra_specials) in _loaded:
        return False
    try:
        return not tokenizer_cache.entry(tokenizer_cache.key(gguf_index.read(path), extra_specials)).is_file()
    except ReplayerError:
        return False  # the load itself reports what is wrong with the file


def load(path: str, extra_specials: tuple[str, ...] = (), progress: Progress | None = None,
         background: bool = True) -> GGUFTokenizer:
    """One tokenizer per GGUF and process (a progress callback does not make another). A cached
    one loads in a worker process (``encode`` waits for it); a first build runs here."""
    key = (path, extra_specials)
    tok = _loaded.get(key)
    if tok is None:
        if len(_loaded) >= 8:
            oldest = _loaded.pop(next(iter(_loaded)))
            stop = getattr(oldest._tok, "stop", None)
            if stop is not None:  # its worker process goes with it (a holder of it goes on in-process)
                stop()
        tok = _loaded[key] = GGUFTokenizer(path, extra_specials, progress, background)
    return tok
