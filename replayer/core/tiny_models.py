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

    from replayer.core.prompt.gguf_tokenizer import _QWEN2

    b2u = _bytes_to_unicode()
    words = Counter()
    for piece, _ in pre_tokenizers.Split(Regex(_QWEN2), behavior="isolated").pre_tokenize_str(_CORPUS):
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


def _vocab(vocab_gguf: str | None) -> tuple[list[str], list[int], list[str], str, int, int]:
    import gguf

    if vocab_gguf:
        from replayer.core.prompt.gguf_tokenizer import _field

        r = gguf.GGUFReader(vocab_gguf, "r")
        tokens = list(_field(r, "tokenizer.ggml.tokens"))
        types = list(_field(r, "tokenizer.ggml.token_type"))
        merges = list(_field(r, "tokenizer.ggml.merges") or [])
        pre = _field(r, "tokenizer.ggml.pre", "qwen2")
        for extra in USER_DEFINED + [t for t in CONTROL if t not in tokens]:
            if extra not in tokens:
                tokens.append(extra)
                types.append(gguf.TokenType.USER_DEFINED if extra in USER_DEFINED else gguf.TokenType.CONTROL)
        return tokens, types, merges, pre, tokens.index("<|endoftext|>"), tokens.index("<|im_end|>")
    base, merges = train_bpe()
    tokens = base + CONTROL + USER_DEFINED
    types = ([gguf.TokenType.NORMAL] * len(base) + [gguf.TokenType.CONTROL] * len(CONTROL)
             + [gguf.TokenType.USER_DEFINED] * len(USER_DEFINED))
    return tokens, types, merges, "qwen2", tokens.index("<|endoftext|>"), tokens.index("<|im_end|>")


def make_tiny(arch: str, out: Path, vocab: str | None = None, seed: int = 0, chat_template: str | None = None) -> Path:
    import gguf

    if arch not in ARCHS:
        raise ReplayerError(f"unknown architecture {arch!r}; choose one of {', '.join(ARCHS)}")
    out = Path(out).expanduser()
    out.parent.mkdir(parents=True, exist_ok=True)
    tokens, types, merges, pre, bos, eos = _vocab(vocab)
    rng = np.random.default_rng(seed)
    n_vocab = len(tokens)
    head_dim = N_EMBD // N_HEAD
    dtype = np.float16 if n_vocab > 4096 else np.float32

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(dtype if len(shape) == 2 and shape[0] == n_vocab else np.float32)

    def norm() -> np.ndarray:
        return np.ones(N_EMBD, dtype=np.float32)

    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    writer = gguf.GGUFWriter(str(tmp), arch)
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

    tensors: dict[str, np.ndarray] = {"token_embd.weight": w(n_vocab, N_EMBD)}
    if arch == "llama":
        writer.add_head_count_kv(N_HEAD)
        writer.add_rope_dimension_count(head_dim)
        writer.add_vocab_size(n_vocab)
        tensors["output_norm.weight"] = norm()
        tensors["output.weight"] = w(n_vocab, N_EMBD)
        for i in range(N_LAYER):
            p = f"blk.{i}."
            tensors |= {p + "attn_norm.weight": norm(), p + "attn_q.weight": w(N_EMBD, N_EMBD),
                        p + "attn_k.weight": w(N_EMBD, N_EMBD), p + "attn_v.weight": w(N_EMBD, N_EMBD),
                        p + "attn_output.weight": w(N_EMBD, N_EMBD), p + "ffn_norm.weight": norm(),
                        p + "ffn_gate.weight": w(N_FF, N_EMBD), p + "ffn_up.weight": w(N_FF, N_EMBD),
                        p + "ffn_down.weight": w(N_EMBD, N_FF)}
    elif arch == "gemma2":
        writer.add_head_count_kv(N_HEAD)
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
        writer.add_sliding_window(256)
        writer.add_attn_logit_softcapping(50.0)
        writer.add_final_logit_softcapping(30.0)
        tensors["output_norm.weight"] = norm()  # output is tied to token_embd
        for i in range(N_LAYER):
            p = f"blk.{i}."
            tensors |= {p + "attn_norm.weight": norm(), p + "attn_q.weight": w(N_EMBD, N_EMBD),
                        p + "attn_k.weight": w(N_EMBD, N_EMBD), p + "attn_v.weight": w(N_EMBD, N_EMBD),
                        p + "attn_output.weight": w(N_EMBD, N_EMBD), p + "post_attention_norm.weight": norm(),
                        p + "ffn_norm.weight": norm(),  # gguf-py's FFN_PRE_NORM
                        p + "ffn_gate.weight": w(N_FF, N_EMBD), p + "ffn_up.weight": w(N_FF, N_EMBD),
                        p + "ffn_down.weight": w(N_EMBD, N_FF), p + "post_ffw_norm.weight": norm()}
    elif arch == "mamba":  # every layer a selective-state-space block: all state is recurrent
        d_inner, d_conv, d_state, dt_rank = 2 * N_EMBD, 4, 16, max(1, N_EMBD // 16)
        writer.add_ssm_conv_kernel(d_conv)
        writer.add_ssm_inner_size(d_inner)  # llama.cpp supports an expansion factor of 2 only
        writer.add_ssm_state_size(d_state)
        writer.add_ssm_time_step_rank(dt_rank)
        writer.add_vocab_size(n_vocab)
        tensors["output_norm.weight"] = norm()  # output is tied to token_embd
        for i in range(N_LAYER):
            p = f"blk.{i}."
            # shapes in numpy order (ggml's reversed); A negative, as -exp(A_log) is in real models
            tensors |= {p + "attn_norm.weight": norm(),
                        p + "ssm_in.weight": w(2 * d_inner, N_EMBD),
                        p + "ssm_conv1d.weight": w(d_inner, d_conv),
                        p + "ssm_conv1d.bias": np.zeros(d_inner, dtype=np.float32),
                        p + "ssm_x.weight": w(dt_rank + 2 * d_state, d_inner),
                        p + "ssm_dt.weight": w(d_inner, dt_rank),
                        p + "ssm_dt.bias": np.zeros(d_inner, dtype=np.float32),
                        p + "ssm_a": -np.tile(np.arange(1, d_state + 1, dtype=np.float32), (d_inner, 1)),
                        p + "ssm_d": np.ones(d_inner, dtype=np.float32),
                        p + "ssm_out.weight": w(N_EMBD, d_inner)}
    else:  # lfm2: layer 0 short-conv (recurrent state), layer 1 attention
        writer.add_head_count_kv([0, N_HEAD])
        writer.add_shortconv_l_cache(3)
        writer.add_vocab_size(n_vocab)
        tensors["token_embd_norm.weight"] = norm()  # LFM2's final norm lives here
        for i in range(N_LAYER):
            p = f"blk.{i}."
            tensors |= {p + "attn_norm.weight": norm(), p + "ffn_norm.weight": norm(),
                        p + "ffn_gate.weight": w(N_FF, N_EMBD), p + "ffn_up.weight": w(N_FF, N_EMBD),
                        p + "ffn_down.weight": w(N_EMBD, N_FF)}
            if i == 0:
                tensors |= {p + "shortconv.conv.weight": w(N_EMBD, 3),
                            p + "shortconv.in_proj.weight": w(3 * N_EMBD, N_EMBD),
                            p + "shortconv.out_proj.weight": w(N_EMBD, N_EMBD)}
            else:
                tensors |= {p + "attn_q.weight": w(N_EMBD, N_EMBD), p + "attn_k.weight": w(N_EMBD, N_EMBD),
                            p + "attn_v.weight": w(N_EMBD, N_EMBD), p + "attn_output.weight": w(N_EMBD, N_EMBD),
                            p + "attn_q_norm.weight": np.ones(head_dim, dtype=np.float32),
                            p + "attn_k_norm.weight": np.ones(head_dim, dtype=np.float32)}
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
