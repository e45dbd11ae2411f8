"""A GGUF's KV walk kept by the file's identity: a second read skips the walk of its strings, and
anything that differs (the file's bytes, the entry's bytes, a forged entry) falls back to the walk."""

from __future__ import annotations

import os
import shutil
from array import array

import pytest

from replayer.core.prompt import gguf_index, gguf_kv, tokenizer_cache
from replayer.core.prompt.gguf_tokenizer import GGUFTokenizer
from replayer.core.tiny_models import make_tiny

from test_tokenizer_cache import TEXT, cache  # noqa: F401  (the text and the fresh cache folder both tests use)

TOKENS = "tokenizer.ggml.tokens"


@pytest.fixture
def model(tmp_path):
    return make_tiny("llama", tmp_path / "m.gguf")


def _values(kv: gguf_kv.GGUFKV) -> dict:
    return {k: kv.get(k) for k in kv.values}


def _entry(path) -> os.PathLike:
    return gguf_index.entry(gguf_index.identity(path))


def test_a_second_read_uses_the_walk_of_the_first_and_reads_the_same_values(cache, model):
    first = gguf_index.read(model)
    assert not first.hinted
    key = tokenizer_cache.key(first)
    assert gguf_index.save(first) is not None and _entry(model).is_file()
    second = gguf_index.read(model)
    assert second.hinted and second.derived == first.derived
    walked = gguf_kv.read(model)
    assert _values(second) == _values(walked) and len(_values(walked)) > 15
    assert second.kv_end == walked.kv_end
    assert list(second.lazy_strings(TOKENS)) == list(walked.lazy_strings(TOKENS))
    lazy = second.lazy_strings(TOKENS)
    assert [lazy[i] for i in (0, 7, -1)] == [walked.lazy_strings(TOKENS)[i] for i in (0, 7, -1)]
    assert tokenizer_cache.key(second) == key == tokenizer_cache.key(walked)
    assert gguf_index.save(second) is None  # nothing new to keep


def test_hints_from_other_bytes_are_not_used(cache, model, tmp_path):
    """The content check, apart from the identity: the hints of a file whose one token differs
    (same lengths, so every position fits) would carry its vocabulary's hash, the wrong key."""
    first = gguf_index.read(model)
    key = tokenizer_cache.key(first)
    hints = first.hints(gguf_index.KEEP_OFFSETS)
    raw = model.read_bytes()
    i = raw.index(b"<|endoftext|>")
    changed = tmp_path / "changed.gguf"
    changed.write_bytes(raw[:i] + b"<|endofteXt|>" + raw[i + 13:])
    kv = gguf_kv.GGUFKV(changed, hints)
    assert not kv.hinted and _values(kv) == _values(gguf_kv.read(changed))
    assert tokenizer_cache.key(kv) != key


def test_a_rewritten_file_misses_its_old_entry(cache, model):
    gguf_index.save(gguf_index.read(model))
    raw = model.read_bytes()
    i = raw.index(b"<|endoftext|>")
    model.write_bytes(raw[:i] + b"<|endofteXt|>" + raw[i + 13:])  # same size
    kv = gguf_index.read(model)
    assert not kv.hinted and "<|endofteXt|>" in kv.get(TOKENS)


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty"])
def test_a_damaged_entry_is_ignored_and_written_again(cache, model, damage):
    gguf_index.save(gguf_index.read(model))
    p = _entry(model)
    raw = p.read_bytes()
    p.write_bytes({"truncate": raw[: len(raw) // 2], "flip": raw[:100] + bytes([raw[100] ^ 1]) + raw[101:],
                   "garbage": os.urandom(len(raw)), "empty": b""}[damage])
    assert gguf_index.load(gguf_index.identity(model)) is None
    kv = gguf_index.read(model)
    assert not kv.hinted and _values(kv) == _values(gguf_kv.read(model))
    gguf_index.save(kv)
    assert gguf_index.read(model).hinted


def _forge(model, change) -> None:
    """Write an entry with a valid trailer whose hints ``change`` altered: what a hostile writer
    of the cache could do."""
    kv = gguf_index.read(model)
    hints = kv.hints(gguf_index.KEEP_OFFSETS)
    change(kv, hints)
    ident = gguf_index.identity(model)
    gguf_index.entry(ident).parent.mkdir(parents=True, exist_ok=True)
    gguf_index.entry(ident).write_bytes(gguf_index._encode(hints, ident))


def _shift_offsets(kv, hints):
    start = kv.values[TOKENS].start
    count, end, offsets = hints.strings[start]
    wrong = array("Q", offsets)
    wrong[3], wrong[4] = wrong[4], wrong[3]
    hints.strings[start] = (count, end, wrong)


def _wrong_end(kv, hints):
    start = kv.values[TOKENS].start
    count, end, offsets = hints.strings[start]
    hints.strings[start] = (count, end - 1, offsets)


def _past_the_file(kv, hints):
    start = kv.values[TOKENS].start
    count, end, offsets = hints.strings[start]
    wrong = array("Q", offsets)
    wrong[5] = 1 << 40
    hints.strings[start] = (count, end, wrong)


@pytest.mark.parametrize("change", [_shift_offsets, _wrong_end, _past_the_file])
def test_a_forged_entry_gives_the_files_own_values(cache, model, change):
    truth = gguf_kv.read(model)
    _forge(model, change)
    kv = gguf_index.read(model)
    tokens = kv.lazy_strings(TOKENS)
    assert [tokens[i] for i in range(len(tokens))] == truth.get(TOKENS)
    assert _values(kv) == _values(truth)


def test_the_tokenizer_loads_the_same_through_the_index_and_without_a_writable_cache(cache, model):
    ref = GGUFTokenizer(model)
    assert not ref.from_cache and _entry(model).is_file()
    again = GGUFTokenizer(model)
    assert again.from_cache and again.encode(TEXT) == ref.encode(TEXT) and len(ref.encode(TEXT)) > 20
    assert again.tokens[again.eos_id] == "<|im_end|>" == ref.tokens[ref.eos_id]
    assert again.tokens[again.bos_id] == ref.tokens[ref.bos_id]
    shutil.rmtree(cache)
    cache.write_text("a file where the directory should be")
    tok = GGUFTokenizer(model)
    assert not tok.from_cache and tok.encode(TEXT) == ref.encode(TEXT)
