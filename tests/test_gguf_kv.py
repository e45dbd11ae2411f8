"""The bounded GGUF KV reader: the same values as gguf-py's reader, and one clear error for a
file whose counts or lengths do not fit in it."""

from __future__ import annotations

import struct

import pytest

from replayer.core.errors import ReplayerError
from replayer.core.prompt import gguf_kv
from replayer.core.tiny_models import make_tiny


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny("llama", tmp_path_factory.mktemp("kv") / "llama.gguf")


def test_values_equal_gguf_py_reader(tiny):
    import gguf

    from replayer.core.prompt.gguf_tokenizer import gguf_field

    ref = gguf.GGUFReader(str(tiny), "r")
    kv = gguf_kv.read(tiny)
    keys = [k for k in ref.fields if not k.startswith("GGUF.")]
    assert len(keys) > 15
    for key in keys:
        assert kv.get(key) == gguf_field(ref, key), key
    assert kv.n_tensors == len(ref.tensors)
    lazy = kv.lazy_strings("tokenizer.ggml.tokens")
    assert list(lazy) == gguf_field(ref, "tokenizer.ggml.tokens")
    assert lazy[-1] == gguf_field(ref, "tokenizer.ggml.tokens")[-1]


def _header(n_kv: int) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, 0, n_kv)


def _key(name: str) -> bytes:
    raw = name.encode()
    return struct.pack("<Q", len(raw)) + raw


@pytest.mark.parametrize("body, words", [
    (_header(10**12), "keys cannot fit"),
    (_header(1) + struct.pack("<Q", 10**9) + b"x" * 32, "key #0 is 1,000,000,000 bytes long"),
    (_header(1) + _key("a") + struct.pack("<I", gguf_kv.STRING) + struct.pack("<Q", 10**6) + b"abc" * 4,
     "a runs past the end"),
    # an array of 2**40 strings in a file of a few bytes: refused before any is read
    (_header(1) + _key("t") + struct.pack("<IIQ", gguf_kv.ARRAY, gguf_kv.STRING, 1 << 40) + b"\0" * 16,
     "t (1,099,511,627,776 strings) runs past"),
    # the last string's length points past the end
    (_header(1) + _key("t") + struct.pack("<IIQ", gguf_kv.ARRAY, gguf_kv.STRING, 2) + struct.pack("<Q", 1) + b"a"
     + struct.pack("<Q", 99), "t runs past the end"),
    (_header(1) + _key("n") + struct.pack("<IIQ", gguf_kv.ARRAY, gguf_kv.U32, 10**9) + b"\0" * 8,
     "n (1,000,000,000 items)"),
    (_header(1) + _key("x") + struct.pack("<I", 99) + b"\0" * 16, "x has unknown type 99"),
    (b"GGML" + b"\0" * 40, "no GGUF magic"),
    (b"GGUF" + struct.pack("<I", 7) + b"\0" * 40, "version 7"),
])
def test_bad_counts_and_lengths_are_one_error(tmp_path, body, words):
    p = tmp_path / "bad.gguf"
    p.write_bytes(body)
    with pytest.raises(ReplayerError) as err:
        gguf_kv.read(p)
    assert words in str(err.value)
    assert "bad.gguf is not a valid GGUF file" in str(err.value)


def test_arrays_nest_only_so_deep(tmp_path):
    body = _header(1) + _key("deep") + struct.pack("<I", gguf_kv.ARRAY)
    body += struct.pack("<IQ", gguf_kv.ARRAY, 1) * 6 + struct.pack("<IQ", gguf_kv.U8, 0)
    p = tmp_path / "deep.gguf"
    p.write_bytes(body)
    with pytest.raises(ReplayerError, match="nests arrays more than 4 deep"):
        gguf_kv.read(p)


def test_missing_short_and_directory(tmp_path):
    with pytest.raises(ReplayerError, match="no such GGUF file"):
        gguf_kv.read(tmp_path / "nope.gguf")
    (tmp_path / "short.gguf").write_bytes(b"GGUF")
    with pytest.raises(ReplayerError, match="only 4 bytes"):
        gguf_kv.read(tmp_path / "short.gguf")
    with pytest.raises(ReplayerError, match="is a directory"):
        gguf_kv.read(tmp_path)
