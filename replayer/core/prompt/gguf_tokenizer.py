"""Exact tokenization from a model's GGUF, without loading weights.

The vocabulary, merges, token types and pre-tokenizer name are read with ``gguf``; the
tokenizer is assembled from the ``tokenizers`` library: byte-level BPE behind the same
pre-tokenizer regex llama.cpp uses for that ``tokenizer.ggml.pre``, or SentencePiece-style
BPE (merges ranked by score, byte fallback) for ``llama``/SPM vocabularies. Control and
user-defined tokens are parsed as single tokens, as the server does with
``parse_special``.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from replayer.core.errors import ReplayerError

# llama.cpp's pre-tokenizer regexes, by tokenizer.ggml.pre
_QWEN2 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN35 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+"
           r"|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_LLAMA3 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
           r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
PRE_TOKENIZERS = {
    "qwen2": _QWEN2, "deepseek-r1-qwen": _QWEN2, "qwen35": _QWEN35,
    "llama-bpe": _LLAMA3, "llama3": _LLAMA3, "smaug-bpe": _LLAMA3, "dbrx": _LLAMA3,
    "gpt-2": _GPT2, "gpt2": _GPT2, "default": _GPT2,
}

TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED, TOKEN_BYTE = 1, 2, 3, 4, 5, 6


def _field(reader: Any, key: str, default: Any = None) -> Any:
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
    """``encode(text, add_special)`` as llama-server's ``/tokenize`` does (parse_special on)."""

    def __init__(self, path: str | Path, extra_specials: tuple[str, ...] = ()) -> None:
        import gguf
        from tokenizers import AddedToken

        self.path = Path(path).expanduser()
        self.name = f"gguf:{self.path}"
        try:
            reader = gguf.GGUFReader(str(self.path), "r")
        except FileNotFoundError:
            raise ReplayerError(f"no such GGUF file: {self.path}") from None
        except Exception as exc:
            raise ReplayerError(f"{self.path} is not a readable GGUF file: {exc}") from None
        model = _field(reader, "tokenizer.ggml.model")
        tokens = _field(reader, "tokenizer.ggml.tokens")
        if not tokens:
            raise ReplayerError(f"{self.path} has no tokenizer vocabulary")
        types = _field(reader, "tokenizer.ggml.token_type") or [TOKEN_NORMAL] * len(tokens)
        self.pre = _field(reader, "tokenizer.ggml.pre", "default")
        self.chat_template = _field(reader, "tokenizer.chat_template")
        self.bos_id = _field(reader, "tokenizer.ggml.bos_token_id")
        self.eos_id = _field(reader, "tokenizer.ggml.eos_token_id")
        self.model = model
        vocab = {t: i for i, t in enumerate(tokens)}
        self.tokens = tokens
        specials = [t for t, ty in zip(tokens, types) if ty in (TOKEN_CONTROL, TOKEN_USER_DEFINED)]
        if extra_specials:
            # a model's GGUF adds tokens its base vocabulary lacks (Qwen2.5's <tool_call>…)
            tokens = list(tokens)
            for extra in extra_specials:
                if extra not in vocab:
                    vocab[extra] = len(tokens)
                    tokens.append(extra)
                specials.append(extra)
            self.tokens = tokens
        if model == "gpt2":
            tok = self._bpe_tokenizer(reader, vocab)
        elif model == "llama":
            tok = self._spm_tokenizer(reader, vocab, tokens, types)
        else:
            raise ReplayerError(f"tokenizer model {model!r} of {self.path.name} is not supported yet")
        tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
        self._tok = tok
        self._spm = model == "llama"

    def _bpe_tokenizer(self, reader: Any, vocab: dict[str, int]) -> Any:
        """A byte-level BPE (``gpt2`` vocabularies) split first by the pre-tokenizer's regex, as
        ``llm_tokenizer_bpe`` does for ``tokenizer.ggml.pre``."""
        from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

        merges_raw = _field(reader, "tokenizer.ggml.merges")
        if not merges_raw:
            raise ReplayerError(f"{self.path}: BPE vocabulary without merges")
        merges = [tuple(m.split(" ", 1)) for m in merges_raw]
        pattern = PRE_TOKENIZERS.get(self.pre)
        if pattern is None:
            raise ReplayerError(f"pre-tokenizer {self.pre!r} of {self.path.name} is not supported yet")
        tok = Tokenizer(models.BPE(vocab, merges, fuse_unk=False, ignore_merges=self.pre in ("llama-bpe", "llama3")))
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
        tok.decoder = decoders.ByteLevel()
        self.add_bos = bool(_field(reader, "tokenizer.ggml.add_bos_token", self.pre in ("llama-bpe", "llama3")))
        return tok

    def _spm_tokenizer(self, reader: Any, vocab: dict[str, int], tokens: list[str], types: list[int]) -> Any:
        """A SentencePiece vocabulary (``llama``) as a BPE over its scores with byte fallback:
        the same pieces llama.cpp's ``llm_tokenizer_spm`` picks."""
        from tokenizers import Tokenizer, decoders, models, normalizers

        scores = _field(reader, "tokenizer.ggml.scores") or [0.0] * len(tokens)
        merges = _spm_merges(tokens, scores, types)
        tok = Tokenizer(models.BPE(vocab, merges, unk_token=tokens[0] if types[0] == TOKEN_UNKNOWN else None,
                                   fuse_unk=True, byte_fallback=True))
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        tok.pre_tokenizer = None
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()])
        self.add_bos = bool(_field(reader, "tokenizer.ggml.add_bos_token", True))
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


@lru_cache(maxsize=8)
def load(path: str, extra_specials: tuple[str, ...] = ()) -> GGUFTokenizer:
    return GGUFTokenizer(path, extra_specials)
