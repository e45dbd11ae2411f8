"""The built GGUF tokenizer, cached on disk by its vocabulary's content hash."""

from __future__ import annotations

import os
import shutil

import pytest

from replayer.core.prompt import gguf_kv, tokenizer_cache
from replayer.core.prompt.gguf_tokenizer import GGUFTokenizer
from replayer.core.tiny_models import make_tiny

TEXT = "<|im_start|>user\nRead src/server.py and run the tests, then summarise ünïcode 123456.<|im_end|>\n"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "tok-cache"
    monkeypatch.setenv("REPLAYER_TOKENIZER_CACHE", str(d))
    return d


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("tc")
    return {"a": make_tiny("llama", d / "a.gguf"), "b": make_tiny("gemma2", d / "b.gguf", seed=3),
            "other": make_tiny("llama", d / "other.gguf", chat_template="{{ messages[0].content }}")}


def test_first_build_reports_progress_then_the_second_loads_the_same_tokenizer(cache, models):
    seen = []
    first = GGUFTokenizer(models["a"], progress=lambda stage, done, total: seen.append((stage, done, total)))
    assert not first.from_cache
    assert [d for _, d, _ in seen] == [0, 1, 2, 3, 4] and all(t == 4 for _, _, t in seen)
    assert len(list(cache.glob("*.json"))) == 1
    seen.clear()
    second = GGUFTokenizer(models["a"], progress=lambda *a: seen.append(a))
    assert second.from_cache and not seen
    assert second.encode(TEXT) == first.encode(TEXT)
    assert len(second.encode(TEXT)) > 20
    assert second.tokens[second.eos_id] == "<|im_end|>"


def test_the_key_is_the_vocabulary_not_the_file(cache, models):
    """Another architecture, seed and chat template over the same vocabulary share one entry;
    extra specials make another."""
    keys = {n: tokenizer_cache.key(gguf_kv.read(p)) for n, p in models.items()}
    assert keys["a"] == keys["b"] == keys["other"]
    assert tokenizer_cache.key(gguf_kv.read(models["a"]), ("<think>",)) != keys["a"]


def test_a_changed_vocabulary_misses(cache, models, tmp_path):
    GGUFTokenizer(models["a"])
    raw = models["a"].read_bytes()
    assert raw.count(b"<|endoftext|>") == 1  # a control token, renamed (same length: offsets hold)
    changed = tmp_path / "changed.gguf"
    changed.write_bytes(raw.replace(b"<|endoftext|>", b"<|endofteXt|>"))
    assert tokenizer_cache.key(gguf_kv.read(changed)) != tokenizer_cache.key(gguf_kv.read(models["a"]))
    tok = GGUFTokenizer(changed)
    assert not tok.from_cache and tok.encode("<|endofteXt|>", add_special=False) == [tok.bos_id]


def test_a_vocabulary_its_merges_do_not_fit_is_one_error(cache, models, tmp_path):
    from replayer.core.errors import ReplayerError
    from replayer.core.tiny_models import _vocab

    token = _vocab(None)[0][300].encode()  # a merged token, renamed: a merge now names a missing token
    raw = models["a"].read_bytes()
    i = raw.index(token)
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(raw[:i] + b"Z" * len(token) + raw[i + len(token):])
    with pytest.raises(ReplayerError, match="broken.gguf: its vocabulary and merges do not fit"):
        GGUFTokenizer(broken)


def test_a_corrupt_entry_is_rebuilt_and_an_unwritable_cache_only_costs_time(cache, models):
    ref = GGUFTokenizer(models["a"]).encode(TEXT)
    (entry,) = cache.glob("*.json")
    entry.write_text('{"version": "1.0", "model": ', encoding="utf-8")
    again = GGUFTokenizer(models["a"])
    assert not again.from_cache and again.encode(TEXT) == ref
    assert GGUFTokenizer(models["a"]).from_cache  # the rebuild was stored
    shutil.rmtree(cache)
    cache.write_text("a file where the directory should be")
    tok = GGUFTokenizer(models["a"])
    assert not tok.from_cache and tok.encode(TEXT) == ref
    assert not [f for f in os.listdir(cache.parent) if ".tmp" in f]
