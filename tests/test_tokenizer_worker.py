"""A cached GGUF tokenizer loads and runs in a worker process (``tokenizer_worker``): the same ids
as in-process, and a worker that cannot (a damaged entry, a worker killed while in use) gives way
to the in-process tokenizer, which rebuilds what is damaged. No worker outlives its tokenizer."""

from __future__ import annotations

import pytest

from replayer.core.prompt import gguf_tokenizer
from replayer.core.prompt.gguf_tokenizer import GGUFTokenizer
from replayer.core.prompt.tokenizer_worker import RemoteTokenizer
from replayer.core.tiny_models import make_tiny

from test_tokenizer_cache import TEXT, cache  # noqa: F401  (the text and the fresh cache folder)

TEXTS = [TEXT, "", "plain words and   spaces\n\n", "ünïcode ✓ 🙂 " * 50, "<|im_end|><|im_start|>"]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return make_tiny("llama", tmp_path_factory.mktemp("tw") / "a.gguf")


def _pair(model) -> tuple[GGUFTokenizer, GGUFTokenizer]:
    here = GGUFTokenizer(model)  # builds the entry, in-process
    there = GGUFTokenizer(model, background=True)  # the entry now exists: a worker loads it
    return here, there


def test_the_worker_encodes_as_the_process_does(cache, model):
    here, there = _pair(model)
    assert there.from_cache and isinstance(there._tok, RemoteTokenizer)
    for text in TEXTS:
        assert there.encode(text) == here.encode(text)
        assert there.encode(text, add_special=False) == here.encode(text, add_special=False)
    proc = there._tok._proc
    assert proc is not None and proc.poll() is None, "the worker served every call"
    there._tok.stop()
    assert proc.poll() is not None, "stopped: no worker left behind"
    assert there.encode(TEXT) == here.encode(TEXT), "after the worker: in-process"


def test_a_damaged_entry_is_rebuilt_in_process(cache, model):
    here = GGUFTokenizer(model)
    [entry] = cache.glob("*.json")
    entry.write_text('{"not": "a tokenizer"', encoding="utf-8")
    there = GGUFTokenizer(model, background=True)
    assert there.encode(TEXT) == here.encode(TEXT)
    assert there._tok._proc is None, "the worker said it could not load"
    assert GGUFTokenizer(model).from_cache and entry.read_text(encoding="utf-8").startswith("{"), "rebuilt"


def test_a_worker_killed_in_use_gives_way_to_the_process(cache, model):
    here, there = _pair(model)
    assert there.encode(TEXT) == here.encode(TEXT)
    there._tok._proc.kill()
    there._tok._proc.wait()
    assert there.encode(TEXTS[3]) == here.encode(TEXTS[3])


def test_load_uses_the_worker_for_a_cached_vocabulary_only(cache, model):
    gguf_tokenizer._loaded.clear()
    first = gguf_tokenizer.load(str(model))
    assert not isinstance(first._tok, RemoteTokenizer), "a first build runs here"
    gguf_tokenizer._loaded.clear()
    second = gguf_tokenizer.load(str(model))
    assert isinstance(second._tok, RemoteTokenizer) and second.encode(TEXT) == first.encode(TEXT)
    second._tok.stop()
    gguf_tokenizer._loaded.clear()


def test_a_tokenizer_dropped_from_the_process_table_stops_its_worker(cache, model, tmp_path):
    """``load`` keeps eight tokenizers a process; the ninth drops the oldest and its worker."""
    gguf_tokenizer._loaded.clear()
    GGUFTokenizer(model)  # the cache entry
    first = gguf_tokenizer.load(str(model))
    proc = first._tok._proc
    for k in range(8):  # eight more entries under other keys (extra specials), each its own
        gguf_tokenizer.load(str(model), extra_specials=(f"<extra{k}>",))
    assert (str(model), ()) not in gguf_tokenizer._loaded and len(gguf_tokenizer._loaded) == 8
    assert proc.poll() is not None, "the dropped tokenizer's worker stopped"
    assert first.encode(TEXT) == GGUFTokenizer(model).encode(TEXT), "its holder goes on in-process"
    for tok in gguf_tokenizer._loaded.values():
        getattr(tok._tok, "stop", lambda: None)()
    gguf_tokenizer._loaded.clear()
