"""Tiny random-weight GGUF models so real llama-server builds can run replays on any CPU.

Two layers, 64-dim embeddings: the output is noise, but the server's prefill scheduler,
its chat-template handling and its checkpoints behave exactly as with a real model of the
same architecture, which is all a replay needs. Three memory kinds, four architectures:

* ``llama`` — plain KV cache: never checkpoints;
* ``gemma2`` — sliding window 256 on layer 0: SWA checkpoints;
* ``lfm2`` — hybrid short-conv + attention: recurrent-state checkpoints;
* ``mamba`` — selective state space only, no attention at all: recurrent-state checkpoints.

The vocabulary is byte-level BPE with ChatML specials, trained here on a small corpus (or
copied from a vocab GGUF with ``vocab=``); the chat template is the bundled ChatML/Qwen2.5
layout with tools, so tool results render as user turns as in #25213.
"""

from __future__ import annotations

import os
from collections import Counter
from functools import lru_cache
from pathlib import Path

import numpy as np

from replayer.core.errors import ReplayerError
from replayer.core.prompt import templates

ARCHS = ("llama", "gemma2", "lfm2", "mamba")
N_EMBD, N_HEAD, N_FF, N_LAYER, N_CTX = 64, 4, 128, 2, 262144
CONTROL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
USER_DEFINED = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
N_MERGES = 252

_CORPUS = """
The user asked the assistant to read a file and run the tests. The assistant called a tool,
the tool returned its result, and the assistant answered with a short summary of the change.
system user assistant tool function arguments name content result error value path command
def main(): return batch_size + n_tokens; if checkpoint is None: raise ValueError("no slot")
{"name": "read_file", "arguments": {"path": "src/server.py", "limit": 200}} import json os sys
Question about the weather in the city, the time of the request, and the size of the prompt.
""" * 3


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte → printable-character map, the alphabet of byte-level BPE."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


@lru_cache(maxsize=1)
def train_bpe() -> tuple[list[str], list[str]]:
    """A greedy BPE trainer: the most frequent adjacent pair merges, N_MERGES times."""
    from tokenizers import Regex, pre_tokenizers

    from replayer.core.prompt.gguf_tokenizer import QWEN2_PRETOKENIZER

    b2u = _bytes_to_unicode()
    words = Counter()
    for piece, _ in pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZER), behavior="isolated").pre_tokenize_str(_CORPUS):
        words[tuple(b2u[b] for b in piece.encode("utf-8"))] += 1
    merges: list[str] = []
    vocab = [b2u[b] for b in range(256)]
    seen = set(vocab)
    for _ in range(N_MERGES):
        pairs = Counter()
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append(f"{a} {b}")
        new = a + b
        if new not in seen:
            vocab.append(new)
            seen.add(new)
        nxt = Counter()
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(new)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            nxt[tuple(out)] += c
        words = nxt
    return vocab, merges


def _vocab(vocab_gguf: str | None, specials: tuple[str, ...] = ()) -> tuple[list[str], list[int], list[str], str, int, int]:
    import gguf

    if vocab_gguf:  # the bounded KV reader: gguf.GGUFReader took ~6 s on a 152k vocabulary
        from replayer.core.prompt import gguf_kv

        kv = gguf_kv.read(vocab_gguf)
        try:
            tokens = list(kv.get("tokenizer.ggml.tokens") or [])
            types = [int(t) for t in kv.get("tokenizer.ggml.token_type") or []]
            merges = list(kv.get("tokenizer.ggml.merges") or [])
            pre = kv.get("tokenizer.ggml.pre", "qwen2")
        finally:
            kv.close()
        for extra in USER_DEFINED + [t for t in CONTROL if t not in tokens] + list(specials):
            if extra not in tokens:
                tokens.append(extra)
                types.append(gguf.TokenType.USER_DEFINED if extra in USER_DEFINED else gguf.TokenType.CONTROL)
        return tokens, types, merges, pre, tokens.index("<|endoftext|>"), tokens.index("<|im_end|>")
    base, merges = train_bpe()
    tokens = base + CONTROL + USER_DEFINED
    types = ([gguf.TokenType.NORMAL] * len(base) + [gguf.TokenType.CONTROL] * len(CONTROL)
             + [gguf.TokenType.USER_DEFINED] * len(USER_DEFINED))
    return tokens, types, merges, "qwen2", tokens.index("<|endoftext|>"), tokens.index("<|im_end|>")


class _Weights:
    """Random weights in a fixed order (the same seed gives the same file)."""

    def __init__(self, seed: int, n_vocab: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.n_vocab = n_vocab
        self.vocab_dtype = np.float16 if n_vocab > 4096 else np.float32

    def w(self, *shape: int) -> np.ndarray:
        dtype = self.vocab_dtype if len(shape) == 2 and shape[0] == self.n_vocab else np.float32
        return (self.rng.standard_normal(shape) * 0.02).astype(dtype)

    @staticmethod
    def norm(n: int = N_EMBD) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    def attention(self, p: str) -> dict[str, np.ndarray]:
        w = self.w
        return {p + "attn_q.weight": w(N_EMBD, N_EMBD), p + "attn_k.weight": w(N_EMBD, N_EMBD),
                p + "attn_v.weight": w(N_EMBD, N_EMBD), p + "attn_output.weight": w(N_EMBD, N_EMBD)}

    def ffn(self, p: str) -> dict[str, np.ndarray]:
        w = self.w
        return {p + "ffn_gate.weight": w(N_FF, N_EMBD), p + "ffn_up.weight": w(N_FF, N_EMBD),
                p + "ffn_down.weight": w(N_EMBD, N_FF)}


def _llama(writer, w: _Weights) -> dict[str, np.ndarray]:
    writer.add_head_count_kv(N_HEAD)
    writer.add_rope_dimension_count(N_EMBD // N_HEAD)
    writer.add_vocab_size(w.n_vocab)
    tensors = {"output_norm.weight": w.norm(), "output.weight": w.w(w.n_vocab, N_EMBD)}
    for i in range(N_LAYER):
        p = f"blk.{i}."
        tensors |= {p + "attn_norm.weight": w.norm(), **w.attention(p), p + "ffn_norm.weight": w.norm(), **w.ffn(p)}
    return tensors


def _gemma2(writer, w: _Weights) -> dict[str, np.ndarray]:
    head_dim = N_EMBD // N_HEAD
    writer.add_head_count_kv(N_HEAD)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_sliding_window(256)
    writer.add_attn_logit_softcapping(50.0)
    writer.add_final_logit_softcapping(30.0)
    tensors = {"output_norm.weight": w.norm()}  # output is tied to token_embd
    for i in range(N_LAYER):
        p = f"blk.{i}."
        tensors |= {p + "attn_norm.weight": w.norm(), **w.attention(p), p + "post_attention_norm.weight": w.norm(),
                    p + "ffn_norm.weight": w.norm(),  # gguf-py's FFN_PRE_NORM
                    **w.ffn(p), p + "post_ffw_norm.weight": w.norm()}
    return tensors


def _mamba(writer, w: _Weights) -> dict[str, np.ndarray]:
    """Every layer a selective-state-space block: all state is recurrent."""
    d_inner, d_conv, d_state, dt_rank = 2 * N_EMBD, 4, 16, max(1, N_EMBD // 16)
    writer.add_ssm_conv_kernel(d_conv)
    writer.add_ssm_inner_size(d_inner)  # llama.cpp supports an expansion factor of 2 only
    writer.add_ssm_state_size(d_state)
    writer.add_ssm_time_step_rank(dt_rank)
    writer.add_vocab_size(w.n_vocab)
    tensors = {"output_norm.weight": w.norm()}  # output is tied to token_embd
    for i in range(N_LAYER):
        p = f"blk.{i}."
        # shapes in numpy order (ggml's reversed); A negative, as -exp(A_log) is in real models
        tensors |= {p + "attn_norm.weight": w.norm(),
                    p + "ssm_in.weight": w.w(2 * d_inner, N_EMBD),
                    p + "ssm_conv1d.weight": w.w(d_inner, d_conv),
                    p + "ssm_conv1d.bias": np.zeros(d_inner, dtype=np.float32),
                    p + "ssm_x.weight": w.w(dt_rank + 2 * d_state, d_inner),
                    p + "ssm_dt.weight": w.w(d_inner, dt_rank),
                    p + "ssm_dt.bias": np.zeros(d_inner, dtype=np.float32),
                    p + "ssm_a": -np.tile(np.arange(1, d_state + 1, dtype=np.float32), (d_inner, 1)),
                    p + "ssm_d": np.ones(d_inner, dtype=np.float32),
                    p + "ssm_out.weight": w.w(N_EMBD, d_inner)}
    return tensors


def _lfm2(writer, w: _Weights) -> dict[str, np.ndarray]:
    """Layer 0 short-conv (recurrent state), layer 1 attention."""
    writer.add_head_count_kv([0, N_HEAD])
    writer.add_shortconv_l_cache(3)
    writer.add_vocab_size(w.n_vocab)
    tensors = {"token_embd_norm.weight": w.norm()}  # LFM2's final norm lives here
    for i in range(N_LAYER):
        p = f"blk.{i}."
        tensors |= {p + "attn_norm.weight": w.norm(), p + "ffn_norm.weight": w.norm(), **w.ffn(p)}
        if i == 0:
            tensors |= {p + "shortconv.conv.weight": w.w(N_EMBD, 3),
                        p + "shortconv.in_proj.weight": w.w(3 * N_EMBD, N_EMBD),
                        p + "shortconv.out_proj.weight": w.w(N_EMBD, N_EMBD)}
        else:
            tensors |= {**w.attention(p), p + "attn_q_norm.weight": w.norm(N_EMBD // N_HEAD),
                        p + "attn_k_norm.weight": w.norm(N_EMBD // N_HEAD)}
    return tensors


_ARCH_TENSORS = {"llama": _llama, "gemma2": _gemma2, "mamba": _mamba, "lfm2": _lfm2}


def _header(writer, arch: str, vocab: tuple, chat_template: str | None) -> None:
    import gguf

    tokens, types, merges, pre, bos, eos = vocab
    writer.add_name(f"replayer-tiny-{arch}")
    writer.add_context_length(N_CTX)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(N_LAYER)
    writer.add_feed_forward_length(0 if arch == "mamba" else N_FF)  # mamba: no FFN, no attention
    writer.add_head_count(0 if arch == "mamba" else N_HEAD)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(1e4)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(bos)
    writer.add_eos_token_id(eos)
    writer.add_pad_token_id(bos)
    writer.add_add_bos_token(False)
    writer.add_chat_template(chat_template or templates.bundled("chatml").source)


def make_tiny(arch: str, out: Path, vocab: str | None = None, seed: int = 0, chat_template: str | None = None,
              pre: str | None = None, specials: tuple[str, ...] = ()) -> Path:
    """``vocab``: a vocabulary GGUF to copy; ``pre``: another ``tokenizer.ggml.pre`` name for
    it; ``specials``: control tokens to add (a model's own chat markers)."""
    import gguf

    if arch not in ARCHS:
        raise ReplayerError(f"unknown architecture {arch!r}; choose one of {', '.join(ARCHS)}")
    out = Path(out).expanduser()
    out.parent.mkdir(parents=True, exist_ok=True)
    voc = _vocab(vocab, specials)
    if pre:
        voc = voc[:3] + (pre,) + voc[4:]
    w = _Weights(seed, len(voc[0]))
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    writer = gguf.GGUFWriter(str(tmp), arch)
    _header(writer, arch, voc, chat_template)
    tensors = {"token_embd.weight": w.w(w.n_vocab, N_EMBD), **_ARCH_TENSORS[arch](writer, w)}
    for name, arr in tensors.items():
        writer.add_tensor(name, arr)
    try:
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out
