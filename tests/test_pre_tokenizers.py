"""Pre-tokenizers as llama.cpp names them: the bundled table is llama-vocab.cpp's, and the
vocabularies llama.cpp tests itself with (``models/ggml-vocab-*.gguf`` + ``.inp``/``.out`` of
the sdist, written by llama.cpp's own test-tokenizer-0) tokenize to its ids."""

from __future__ import annotations

import struct

import pytest

from replayer.core.errors import ReplayerError
from replayer.core.prompt import pre_tokenizers
from replayer.core.prompt.gguf_tokenizer import GGUFTokenizer


def test_every_deepseek_name_and_the_issue_s_examples_are_known():
    names = pre_tokenizers.names()
    assert len(names) > 80
    for name, kind in [("deepseek-llm", "DEEPSEEK_LLM"), ("deepseek-coder", "DEEPSEEK_CODER"),
                       ("deepseek-v3", "DEEPSEEK3_LLM"), ("deepseek-r1-qwen", "QWEN2"), ("llama-bpe", "LLAMA3"),
                       ("glm4", "CHATGLM4"), ("tekken", "TEKKEN"), ("default", "DEFAULT")]:
        pre = pre_tokenizers.lookup(name)
        assert pre.type == kind and pre.regexes and pre.unsupported is None, name
        assert pre.source.startswith("llama-vocab.cpp:")
    assert pre_tokenizers.lookup("llama-bpe").ignore_merges and pre_tokenizers.lookup("llama-bpe").add_bos
    assert len(pre_tokenizers.lookup("deepseek-llm").regexes) == 6
    assert pre_tokenizers.lookup(None).type == "DEFAULT"  # no tokenizer.ggml.pre: llama.cpp's default


def test_unknown_and_unsupported_names_are_one_clear_line():
    with pytest.raises(ReplayerError) as err:
        pre_tokenizers.lookup("deepseek-lm", "m.gguf")
    assert "pre-tokenizer 'deepseek-lm' of m.gguf is not one llama.cpp" in str(err.value)
    assert "deepseek-llm" in (err.value.hint or "")
    for name, why in [("kimi-k2", "hand-written code"), ("gemma4", "raw UTF-8")]:
        with pytest.raises(ReplayerError, match=why):
            pre_tokenizers.require_supported(pre_tokenizers.lookup(name), "m.gguf")


def test_generator_reads_cases_flags_and_cxx_escapes():
    src = '''struct llm_tokenizer_bpe : llm_tokenizer {
        switch (vocab.get_pre_type()) {
            case LLAMA_VOCAB_PRE_TYPE_A:
            case LLAMA_VOCAB_PRE_TYPE_B:
                regex_exprs = {
                    "[\\r\\n]", // newline
                    "\\\\p{N}+",
                };
                break;
            default:
                regex_exprs = {
                    "\\\\s+\\"",
                };
                byte_encode = false;
                break;
        }
    std::vector<std::string> regex_exprs;
    x
            } else if (tokenizer_pre == "default") {
                pre_type = LLAMA_VOCAB_PRE_TYPE_DEFAULT;
            } else if (
                    tokenizer_pre == "a-one" ||
                    tokenizer_pre == "a-two") {
                pre_type = LLAMA_VOCAB_PRE_TYPE_A;
                ignore_merges = true;
            } else if (tokenizer_pre == "b") {
                pre_type = LLAMA_VOCAB_PRE_TYPE_B;
            } else {
                throw std::runtime_error(format("unknown pre-tokenizer type: '%s'", tokenizer_pre.c_str()));
'''
    t = pre_tokenizers.table_from_source(src)
    assert t["types"]["A"]["regexes"] == ["[\r\n]", "\\p{N}+"] == t["types"]["B"]["regexes"]
    assert t["types"]["DEFAULT"] == {"regexes": ['\\s+"'], "byte_encode": False, "line": 11}
    assert t["names"]["a-one"] == {"type": "A", "line": 22, "ignore_merges": True}
    assert t["names"]["a-two"]["ignore_merges"] and "ignore_merges" not in t["names"]["b"]
    assert set(t["names"]) == {"default", "a-one", "a-two", "b"}


@pytest.mark.live
def test_bundled_table_is_the_sdist_s(sdist_src):
    import json
    from importlib import resources

    bundled = json.loads(resources.files("replayer.data").joinpath("pre_tokenizers.json").read_text("utf-8"))
    fresh = pre_tokenizers.table_from_source((sdist_src / "llama-vocab.cpp").read_text("utf-8"))
    assert bundled["types"] == fresh["types"] and bundled["names"] == fresh["names"]


def _vectors(gguf):
    raw = gguf.with_name(gguf.name + ".inp").read_text(encoding="utf-8")
    texts = raw.split("\n__ggml_vocab_test__\n")
    outs = gguf.with_name(gguf.name + ".out").read_text(encoding="utf-8").split("\n")
    return [(t, [int(x) for x in o.split()]) for t, o in zip(texts, outs)]


VOCABS = ["deepseek-llm", "deepseek-coder", "qwen2", "qwen35", "llama-bpe", "gpt-2", "falcon", "starcoder",
          "command-r", "refact", "mpt", "llama-spm", "phi-3"]


@pytest.mark.live
@pytest.mark.parametrize("vocab", VOCABS)
def test_llama_cpp_s_own_vectors(sdist_models, vocab):
    gguf = sdist_models / f"ggml-vocab-{vocab}.gguf"
    tok = GGUFTokenizer(gguf)
    vectors = _vectors(gguf)
    assert len(vectors) >= 40
    wrong = [(t, ids) for t, ids in vectors if tok.encode(t, add_special=False) != ids]
    assert not wrong, f"{len(wrong)} of {len(vectors)} differ, first {wrong[0][0]!r}"


@pytest.fixture(scope="module")
def sdist_models():
    from replayer.core.builds import manager

    return manager.sdist_models_dir(9859)


@pytest.fixture(scope="module")
def sdist_src(sdist_models):
    """src/ of the same sdist, extracted read-only next to its models/."""
    import tarfile

    from replayer.core import paths
    from replayer.core.builds import index

    out = sdist_models.parent / "src-9859"
    if not (out / "llama-vocab.cpp").exists():
        tarball = index.download(index.find_sdist(9859), paths.builds_dir() / "sdists")
        out.mkdir(parents=True, exist_ok=True)
        with tarfile.open(tarball) as tf:
            member = next(m for m in tf.getmembers() if m.name.endswith("/src/llama-vocab.cpp"))
            (out / "llama-vocab.cpp").write_bytes(tf.extractfile(member).read())
    return out
