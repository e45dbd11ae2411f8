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


@pytest.mark.parametrize("element", [9, 13])
def test_a_nested_or_unknown_array_type_is_refused_as_llama_cpp_refuses_it(tmp_path, element):
    """The 30,000-case run's 11 s / 193 MB GGUF case: the tokens array's element type flipped from
    string (8) to array (9): gguf.cpp refuses the key ("has invalid GGUF type"), the library
    reader walked every element as an array first."""
    from replayer.core.tiny_models import make_tiny

    data = bytearray(make_tiny("llama", tmp_path / "tiny.gguf").read_bytes())
    key = b"tokenizer.ggml.tokens"
    at = data.index(key) + len(key) + 4  # the value type (array), then the element type
    assert struct.unpack_from("<II", data, at - 4) == (9, 8)
    struct.pack_into("<I", data, at, element)
    f = tmp_path / "nested.gguf"
    f.write_bytes(bytes(data))
    with pytest.raises(ReplayerError, match=f"'tokenizer.ggml.tokens' has type {element}, which llama.cpp refuses"):
        gguf_model.read(f)


def _tiny_with(tmp_path, key: bytes, value: int, name: str):
    """The tiny llama GGUF with one u32 key-value set to ``value`` (the bytes after the key: type, value)."""
    from replayer.core.tiny_models import make_tiny

    data = bytearray(make_tiny("llama", tmp_path / "tiny.gguf").read_bytes())
    at = data.index(key) + len(key)
    assert struct.unpack_from("<I", data, at)[0] == 4  # GGUF_TYPE_UINT32
    struct.pack_into("<I", data, at + 4, value)
    f = tmp_path / name
    f.write_bytes(bytes(data))
    return f


def test_a_flipped_block_count_is_refused_before_the_per_layer_tables(tmp_path):
    """The fuzz run's 1.7 GB case: a byte of ``llama.block_count`` flipped (2 → 16,777,218). The
    per-layer tuples were built from it: 200 million layers took 6 GB and 42 s, and the model
    was accepted. llama.cpp's loader refuses more than LLAMA_MAX_LAYERS (512)."""
    f = _tiny_with(tmp_path, b"llama.block_count", 2 | (1 << 24), "layers.gguf")
    with pytest.raises(ReplayerError, match="block_count is 16,777,218; llama.cpp loads 1 to 512 layers"):
        gguf_model.read(f)


def test_block_count_limit_is_llamas(tmp_path):
    with pytest.raises(ReplayerError, match="block_count is 513"):
        gguf_model.read(_tiny_with(tmp_path, b"llama.block_count", 513, "513.gguf"))
    assert gguf_model.read(_tiny_with(tmp_path, b"llama.block_count", 512, "512.gguf")).n_layer == 512


def test_more_experts_than_llama_loads_are_refused(tmp_path):
    L, d = 2, 64
    t = [("token_embd.weight", (4, d)), ("output.weight", (4, d))]
    for i in range(L):
        t += [(f"blk.{i}.attn_q.weight", (d, d)), (f"blk.{i}.ffn_up_exps.weight", (4, d, 128))]
    kv = {"{arch}.block_count": L, "{arch}.embedding_length": d, "{arch}.attention.head_count": 4,
          "{arch}.attention.head_count_kv": 4, "{arch}.expert_count": 1 << 24, "{arch}.expert_used_count": 8}
    f = header_only_gguf(tmp_path / "experts.gguf", "qwen3moe", kv, t)
    with pytest.raises(ReplayerError, match="expert_count 16,777,216 / used 8; llama.cpp loads at most 512"):
        gguf_model.read(f)


@pytest.mark.live
def test_the_layer_limit_is_the_real_servers(tmp_path):
    """Real b10001 on the same files: 513 layers fail in its hyper-parameters ("n > N_MAX"), 512
    pass them (and stop at the tensors the tiny file does not have), as the reader decides."""
    import socket
    import subprocess

    from replayer.core.builds import manager

    binary = manager.install(10001, "cpu").binary
    for n, refused in ((513, True), (512, False)):
        f = _tiny_with(tmp_path, b"llama.block_count", n, f"{n}.gguf")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        r = subprocess.run([str(binary), "-m", str(f), "--host", "127.0.0.1", "--port", str(port), "-t", "1"],
                           capture_output=True, text=True, timeout=120)
        log = r.stdout + r.stderr
        assert r.returncode != 0, log[-2000:]
        assert ("n > N_MAX: 513 > 512" in log) is refused, log[-2000:]
        if refused:
            with pytest.raises(ReplayerError, match="block_count is 513"):
                gguf_model.read(f)
        else:
            assert "missing tensor 'blk.2." in log, log[-2000:]
            assert gguf_model.read(f).n_layer == 512
