"""Built GGUF tokenizers kept on disk, keyed by the content hash of their vocabulary.

Building the ``tokenizers`` object of a 152k-token vocabulary (dicts of tokens and merges,
then the BPE model) costs seconds; loading the same object back from its JSON costs a
fraction of one. The key hashes the bytes the tokenizer is built from, as the GGUF stores
them (tokens, types, merges, scores), with the model and pre-tokenizer names, the extra
specials, this cache's format and the ``tokenizers`` version: the same vocabulary in two
GGUFs (two quantisations of one model) shares one entry, and a changed vocabulary or
library never loads a stale one.

The directory is ``paths.tokenizer_cache_dir()`` (``$REPLAYER_TOKENIZER_CACHE`` moves it; the
tests set it). A missing, unreadable or corrupt entry is rebuilt; a cache that cannot be
written only costs the next run its speed.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from replayer.core import paths

#: bump when what is stored (or how it is built) changes
FORMAT = 2
_PARTS = ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges", "tokenizer.ggml.scores")
_NAMES = ("tokenizer.ggml.model", "tokenizer.ggml.pre")


def _tokenizers_version() -> str:
    # the module's own attribute: importlib.metadata's lookup scans the installed distributions,
    # and tokenizers is imported for the load anyway
    try:
        import tokenizers

        return str(tokenizers.__version__)
    except Exception:  # noqa: BLE001 - an unusual install: the key just changes with it
        return "unknown"


def vocab_digest(kv: Any) -> str:
    """The hash of the bytes the tokenizer is built from, as the GGUF stores them, with the
    model and pre-tokenizer names. Kept with the file's walk (``kv.derive``: ``gguf_index``),
    so a second read does not hash the 5 MB again."""
    h = hashlib.blake2b(digest_size=20)
    for name in _NAMES:
        h.update(f"{name}={kv.get(name)!s}\0".encode())
    for part in _PARTS:
        raw = kv.raw(part)
        h.update(f"{part}:{len(raw)}\0".encode())
        h.update(raw)
    return h.hexdigest()


def key(kv: Any, extra_specials: tuple[str, ...] = ()) -> str:
    """The cache key of a GGUF's vocabulary (``kv``: a ``gguf_kv.GGUFKV``): its content hash,
    the extra specials, this cache's format and the tokenizers version."""
    digest = kv.derive("tokenizer-vocab", vocab_digest)
    h = hashlib.blake2b(digest_size=20)
    h.update(f"replayer-tokenizer/{FORMAT}/{_tokenizers_version()}\0{digest}\0".encode())
    h.update("\0".join(extra_specials).encode())
    return h.hexdigest()


def entry(k: str) -> Path:
    return paths.tokenizer_cache_dir() / f"{k}.json"


def load(k: str) -> Any | None:
    """The cached tokenizer, or None (absent, unreadable, or not a tokenizer)."""
    p = entry(k)
    if not p.is_file():
        return None
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_file(str(p))
    except Exception:  # noqa: BLE001 - a corrupt entry is rebuilt, never an error
        return None


def store(k: str, tok: Any) -> Path | None:
    """Write atomically (a reader never sees half a file); None when the cache is not writable."""
    p = entry(k)
    tmp = p.with_name(f"{p.name}.tmp{os.getpid()}")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(tok.to_str(), encoding="utf-8")
        os.replace(tmp, p)
    except OSError:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:  # no directory to have left it in
            pass
        return None
    return p
