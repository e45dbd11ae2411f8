"""GGUF headers checked before the reader allocates (issue 24): a million-entry header, counts
the file cannot hold, and impossible attention shapes (head_count = 0)."""

from __future__ import annotations

import os
import struct

import pytest

from test_gguf_model import header_only_gguf
from replayer.core.errors import ReplayerError
from replayer.core.hardware import gguf_model


def _fixed_header(path, n_tensors: int, n_kv: int, size: int):
    with open(path, "wb") as fh:
        fh.write(b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv))
    os.truncate(path, size)
    return path


def test_million_entry_header_is_refused_before_reading(tmp_path):
    f = _fixed_header(tmp_path / "million.gguf", 1, 1_000_000, 23 << 20)
    with pytest.raises(ReplayerError, match="claims 1,000,000 key-values .* not a model file"):
        gguf_model.read(f)


def test_counts_larger_than_the_file_are_refused(tmp_path):
    f = _fixed_header(tmp_path / "small.gguf", 50_000, 60_000, 4096)
    with pytest.raises(ReplayerError, match="more than 4,096 bytes can hold"):
        gguf_model.read(f)


def _llama(path, heads: int, heads_kv: int):
    L, d = 2, 64
    t = [("token_embd.weight", (4, d)), ("output.weight", (4, d))]
    for i in range(L):
        t += [(f"blk.{i}.attn_q.weight", (d, d)), (f"blk.{i}.ffn_up.weight", (d, 128))]
    kv = {"{arch}.block_count": L, "{arch}.embedding_length": d, "{arch}.context_length": 4096,
          "{arch}.attention.head_count": heads, "{arch}.attention.head_count_kv": heads_kv}
    return header_only_gguf(path, "llama", kv, t)


@pytest.mark.parametrize("heads,heads_kv", [(0, 0), (4, 0), (4, 8)])
def test_impossible_head_counts_are_refused(tmp_path, heads, heads_kv):
    f = _llama(tmp_path / f"h{heads}-{heads_kv}.gguf", heads, heads_kv)
    with pytest.raises(ReplayerError, match=f"head_count {heads} and head_count_kv {heads_kv}"):
        gguf_model.read(f)


def test_sane_heads_still_read(tmp_path):
    m = gguf_model.read(_llama(tmp_path / "ok.gguf", 4, 2))
    assert m.n_head == (4, 4) and m.n_head_kv == (2, 2)


def test_array_length_past_the_end_is_refused_before_allocating(tmp_path):
    """The fuzz run's 83 s / 7.3 GB case: a string array's element count with a high bit flipped."""
    from replayer.core.tiny_models import make_tiny

    data = bytearray(make_tiny("llama", tmp_path / "tiny.gguf").read_bytes())
    key = b"tokenizer.ggml.tokens"
    at = data.index(key) + len(key) + 8  # the value type and the element type, then the count
    count = struct.unpack("<Q", data[at:at + 8])[0]
    data[at:at + 8] = struct.pack("<Q", count | (1 << 40))
    f = tmp_path / "flipped.gguf"
    f.write_bytes(bytes(data))
    with pytest.raises(ReplayerError, match="runs past the end of the file"):
        gguf_model.read(f)
