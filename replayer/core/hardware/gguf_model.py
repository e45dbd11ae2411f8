"""A model profile from a GGUF header: what a simulated replay needs to know of the user's model.

Only the header is read (``gguf.GGUFReader`` memory-maps the file; tensor data stays on
disk, untouched): the hyper-parameters, the tensor table (names, element counts, bytes)
and the tokenizer fields. From these come

* the memory kind the server builds, as ``llama_model::create_memory`` chooses it
  (``src/llama-model.cpp``): ``recurrent`` for the archs of ``llm_arch_is_recurrent``,
  hybrid (replayer's ``recurrent``: checkpoints of the recurrent state) for
  ``llm_arch_is_hybrid``, ``swa`` when the arch's ``load_hparams`` (``src/models/<arch>.cpp``)
  sets a sliding-window type, else ``plain`` (a KV cache, no checkpoints);
* the checkpoint size: the recurrent state of the recurrent layers (``n_embd_r`` +
  ``n_embd_s`` f32 values each, ``src/llama-hparams.cpp``) or the SWA layers' cache;
* the cost-model constants of ``perf-calibration.json``'s ``models`` table (layers,
  parameters read per call, expert split, attention FLOPs and KV bytes per context token).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, NamedTuple

from replayer.core.errors import ReplayerError
from replayer.core.hardware.perf_data import ModelConstants

# llm_arch_is_recurrent / llm_arch_is_hybrid (src/llama-arch.cpp, b9859 and b10001 alike)
RECURRENT_ARCHS = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})
HYBRID_ARCHS = frozenset({"jamba", "falcon-h1", "plamo2", "granitehybrid", "lfm2", "lfm2moe", "nemotron_h",
                          "nemotron_h_moe", "qwen3next", "kimi-linear", "qwen35", "qwen35moe"})
#: hybrids whose recurrent layers are gated delta nets: the cost model's hybrid factor applies
GATED_DELTA_NET_ARCHS = frozenset({"qwen3next", "qwen35", "qwen35moe", "kimi-linear"})
#: archs whose load_hparams sets a sliding window: (n_swa when the key is absent, SWA pattern
#: period). A default of None: SWA only when ``attention.sliding_window`` is present and > 0.
SWA_ARCHS: dict[str, tuple[int | None, int]] = {
    "gemma2": (4096, 2), "gemma3": (None, 6), "gemma3n": (None, 5), "gemma4": (None, 6), "cohere2": (None, 4),
    "cohere2moe": (None, 4), "exaone-moe": (128, 4), "exaone4": (None, 4), "gpt-oss": (None, 2),
    "olmo2": (None, 4), "plamo3": (None, 8), "smallthinker": (None, 4), "llama4": (8192, 4), "afmoe": (None, 4),
    "mellum": (None, 4), "mimo2": (None, 4), "step35": (None, 4), "deepseek4": (None, 0), "lfm2": (None, 1),
}
#: not language models a chat server can prefill (vision/audio projectors, encoders)
NOT_LM_ARCHS = frozenset({"clip", "mmproj", "whisper", "bert", "nomic-bert", "jina-bert-v2", "modern-bert",
                          "gemma-embedding", "t5encoder", "wavtokenizer-dec"})
EXPERT_MARK = "_exps"  # blk.N.ffn_{gate,up,down,gate_up}_exps.weight: routed experts


def _quant_name(file_type: int | None) -> str:
    import gguf

    try:
        return gguf.LlamaFileType(int(file_type)).name.removeprefix("MOSTLY_") if file_type is not None else "?"
    except ValueError:
        return f"type {file_type}"


@dataclass(frozen=True)
class GGUFModel:
    """The header facts of one GGUF and what follows from them."""

    path: str
    arch: str
    name: str
    n_layer: int
    n_embd: int
    n_head: tuple[int, ...]  # per layer (0 on recurrent layers)
    n_head_kv: tuple[int, ...]
    head_dim_k: int
    head_dim_v: int
    n_ctx_train: int
    n_swa: int  # 0 when the model has no sliding window
    swa_layers: tuple[bool, ...]
    recurrent_layers: tuple[bool, ...]
    n_expert: int
    n_expert_used: int
    file_type: str
    weight_bytes: int
    expert_bytes: int
    params: int
    expert_params: int
    matmul_params: int  # non-expert parameters multiplied per token (all but the embedding lookup)
    matmul_bytes: int
    state_floats_per_layer: int  # n_embd_r + n_embd_s of one recurrent layer
    has_chat_template: bool
    n_vocab: int
    memory: str = field(init=False)

    def __post_init__(self) -> None:
        if self.arch in RECURRENT_ARCHS or self.arch in HYBRID_ARCHS:
            kind = "recurrent"  # hybrids checkpoint their recurrent state like pure recurrent models
        elif self.n_swa > 0:
            kind = "swa"
        else:
            kind = "plain"
        object.__setattr__(self, "memory", kind)

    @property
    def kind_label(self) -> str:
        """The memory kind as llama.cpp names the cache it builds."""
        if self.arch in HYBRID_ARCHS:
            return "hybrid"
        return {"plain": "kv", "swa": "iswa", "recurrent": "recurrent"}[self.memory]

    @property
    def attn_layers(self) -> list[int]:
        return [i for i in range(self.n_layer) if not self.recurrent_layers[i] and self.n_head_kv[i] > 0]

    def kv_bytes_per_cell(self, layers: list[int]) -> int:
        """f16 K and V of one context cell over ``layers`` (llama-server's default cache types)."""
        return sum(self.n_head_kv[i] * (self.head_dim_k + self.head_dim_v) * 2 for i in layers)

    def checkpoint_mib(self) -> float:
        """Size of one context checkpoint as the server logs it: ``llama_state_seq_get_size`` of
        the partial state, i.e. the recurrent cells of the recurrent layers, or the n_swa
        unmasked cells of the SWA cache (``state_write`` in ``llama-memory-recurrent.cpp`` and
        ``llama-kv-cache.cpp``: a few headers, 12 bytes of metadata per cell, then the rows)."""
        head = 8 + 4  # io magic + seq id, cell count
        if self.memory == "recurrent":
            n_recr = sum(self.recurrent_layers)
            size = head + 12 + 8 + n_recr * (24 + self.state_floats_per_layer * 4)
        elif self.memory == "swa":
            cells = self.n_swa
            swa = [i for i in self.attn_layers if self.swa_layers[i]]
            size = head + 4 + cells * 12 + 8 + 24 * len(swa) + cells * self.kv_bytes_per_cell(swa)
        else:
            return 0.0
        return size / 2**20

    def constants(self) -> ModelConstants:
        """The cost model's per-model constants (``perf-calibration.json`` → ``models_fields``)."""
        moe = self.n_expert > 1 and self.expert_params > 0
        full = [i for i in self.attn_layers if not self.swa_layers[i]]
        att = 4 * sum(self.n_head[i] * self.head_dim_k for i in full)
        return ModelConstants(
            name=f"{self.arch} {self.name} {self.file_type}", L=self.n_layer, moe=moe,
            N_ne=float(self.matmul_params), N_e_tot=float(self.expert_params),
            N_e_act=float(self.expert_params * self.n_expert_used / self.n_expert) if moe else 0.0,
            E=self.n_expert if moe else 1, k=self.n_expert_used if moe else 1,
            W_ne=float(self.matmul_bytes), W_e=float(self.expert_bytes),
            att=att, kv=self.kv_bytes_per_cell(full), hybrid=self.arch in GATED_DELTA_NET_ARCHS,
        )

    def summary(self) -> dict[str, Any]:
        """What ``presets``/``replay`` report about the model."""
        heads = sorted({h for h in self.n_head if h})
        kv_heads = sorted({h for h in self.n_head_kv if h})
        return {"path": self.path, "arch": self.arch, "name": self.name, "layers": self.n_layer,
                "n_embd": self.n_embd, "n_head": heads[0] if len(heads) == 1 else heads,
                "n_head_kv": kv_heads[0] if len(kv_heads) == 1 else kv_heads, "head_dim": self.head_dim_k,
                "context_length": self.n_ctx_train, "memory": self.kind_label, "n_swa": self.n_swa,
                "swa_layers": sum(self.swa_layers), "recurrent_layers": sum(self.recurrent_layers),
                "experts": self.n_expert, "experts_used": self.n_expert_used, "file_type": self.file_type,
                "weight_gib": round(self.weight_bytes / 2**30, 3), "params": self.params,
                "checkpoint_mib": round(self.checkpoint_mib(), 3)}


def is_gguf_path(text: str) -> bool:
    """``--model`` names a GGUF file (rather than a preset) when it ends in .gguf or is a file."""
    return text.lower().endswith(".gguf") or os.sep in text or Path(text).expanduser().is_file()


def read(path: str | Path) -> GGUFModel:
    """The profile of a GGUF file; ReplayerError (one line) when it is missing, damaged or no LM."""
    p = Path(path).expanduser()
    try:
        st = p.stat()
    except OSError:
        raise ReplayerError(f"no such GGUF file: {p}") from None
    return _read(str(p.resolve()), st.st_mtime_ns, st.st_size)


#: ``LLAMA_MAX_LAYERS`` and ``LLAMA_MAX_EXPERTS`` (src/llama-hparams.h): the loader refuses more
#: ("n > N_MAX"). The per-layer tuples are built from block_count, so a flipped byte there
#: (200 million layers) took 6 GB and 42 s before this check.
MAX_LAYERS, MAX_EXPERTS = 512, 512
#: far above any real model (~50 key-values; a few thousand tensors with unmerged experts):
#: the reader builds Python objects per entry, so a million-entry header takes minutes and GBs
MAX_KV, MAX_TENSORS = 65_536, 262_144
#: the smallest encodings: a key-value (key length, one character, type, a one-byte value) and
#: a tensor entry (name length, one character, n_dims, one dim, type, offset)
_MIN_KV_BYTES, _MIN_TENSOR_BYTES = 14, 33


def check_header_counts(path: str, size: int) -> None:
    """The counts in a GGUF's fixed header checked against limits and the file's size before
    the reader allocates for them (gguf.cpp reads the same three fields first: magic, version,
    n_tensors, n_kv)."""
    import struct

    try:
        with open(path, "rb") as fh:
            head = fh.read(24)
    except OSError as exc:
        raise ReplayerError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(head) < 24 or head[:4] != b"GGUF":
        return  # the reader names what is wrong
    order = "<" if struct.unpack("<I", head[4:8])[0] < 0x10000 else ">"
    n_tensors, n_kv = struct.unpack(order + "QQ", head[8:24])
    if n_kv > MAX_KV or n_tensors > MAX_TENSORS:
        raise ReplayerError(f"{path}: the GGUF header claims {n_kv:,} key-values and {n_tensors:,} tensors "
                            f"(limits {MAX_KV:,} and {MAX_TENSORS:,}): not a model file")
    if 24 + n_kv * _MIN_KV_BYTES + n_tensors * _MIN_TENSOR_BYTES > size:
        raise ReplayerError(f"{path}: the GGUF header claims {n_kv:,} key-values and {n_tensors:,} tensors, "
                            f"more than {size:,} bytes can hold (damaged header)")
    _check_kv_lengths(path, order, n_kv, size)


#: bytes of each GGUF scalar type (gguf.cpp ``GGUF_TYPE_SIZE``); 8 is a string, 9 an array
_SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def _check_kv_lengths(path: str, order: str, n_kv: int, size: int) -> None:
    """Every string and array length in the key-value section checked against the bytes left
    before the reader allocates for it (a flipped length bit made it take 7 GB)."""
    import struct

    def bad(what: str) -> ReplayerError:
        return ReplayerError(f"{path}: a GGUF {what} runs past the end of the file (damaged header)")

    with open(path, "rb") as fh:
        def take(n: int) -> bytes:
            if fh.tell() + n > size:
                raise bad("length")
            return fh.read(n)

        def u(fmt: str) -> int:
            return struct.unpack(order + fmt, take(struct.calcsize(fmt)))[0]

        def string() -> bytes:
            n = u("Q")
            if fh.tell() + n > size:
                raise bad("string")
            head = fh.read(min(n, 80))  # a key's name, for the message; the rest skipped
            fh.seek(n - len(head), 1)
            return head

        def invalid(key: bytes, t: int) -> ReplayerError:
            # gguf.cpp refuses the same ("key '%s' has invalid GGUF type %d"): the library reader
            # would walk a nested array's elements as arrays first (9 s and 193 MB on 595 KB)
            return ReplayerError(f"{path}: the GGUF key {key.decode('utf-8', 'replace')!r} has type {t}, which "
                                 "llama.cpp refuses (no nested arrays, no unknown types): damaged header")

        fh.seek(24)
        for _ in range(n_kv):
            key = string()
            t = u("I")
            if t == 8:
                string()
            elif t == 9:
                et, count = u("I"), u("Q")
                if et == 8:
                    if fh.tell() + count * 8 > size:
                        raise bad("array")
                    for _ in range(count):
                        string()
                elif et in _SCALAR:
                    if fh.tell() + count * _SCALAR[et] > size:
                        raise bad("array")
                    fh.seek(count * _SCALAR[et], 1)
                else:
                    raise invalid(key, et)
            elif t in _SCALAR:
                take(_SCALAR[t])
            else:
                raise invalid(key, t)


@lru_cache(maxsize=16)
def _read(path: str, _mtime: int, _size: int) -> GGUFModel:
    import gguf

    check_header_counts(path, _size)
    try:
        reader = gguf.GGUFReader(path, "r")
    except Exception as exc:  # bad magic, truncated header, tensor data past the end of the file
        raise ReplayerError(f"{path} is not a readable GGUF file ({type(exc).__name__}: {exc})") from None
    try:
        return _profile(path, reader)
    except ReplayerError:
        raise
    except Exception as exc:  # a field of the wrong type or shape: a damaged header
        raise ReplayerError(f"{path} has a damaged GGUF header ({type(exc).__name__}: {exc})") from None


def _profile(path: str, reader: Any) -> GGUFModel:
    """The header read in the order the server's loader reads it: identity, attention shape,
    memory kind (recurrent layers, sliding window, state size), then the tensor table."""
    from replayer.core.prompt.gguf_tokenizer import gguf_field

    def get(key: str, default: Any = None) -> Any:
        return gguf_field(reader, key, default)

    arch, n_layer, n_embd, n_vocab = _identity(path, reader, get)

    def per_layer(key: str, default: int) -> tuple[int, ...]:
        v = get(key, default)
        if isinstance(v, list):
            if len(v) != n_layer:
                raise ReplayerError(f"{path}: {key} has {len(v)} values for {n_layer} layers (damaged header)")
            return tuple(int(x) for x in v)
        return (int(v if v is not None else default),) * n_layer

    n_head = per_layer(f"{arch}.attention.head_count", 0)
    n_head_kv = per_layer(f"{arch}.attention.head_count_kv", max(n_head) if n_head else 0)
    h0 = max(n_head) if n_head else 0
    head_k = int(get(f"{arch}.attention.key_length", n_embd // h0 if h0 else 0) or 0)
    head_v = int(get(f"{arch}.attention.value_length", head_k) or 0)
    recurrent = _recurrent_layers(arch, get, n_layer, n_head_kv)
    _check_heads(path, arch, n_head, n_head_kv, recurrent)
    n_swa, swa_layers = _sliding_window(arch, get, n_layer, recurrent)
    state = _state_floats(arch, get, n_embd) if any(recurrent) else 0
    t = _tensor_table(path, reader)
    n_expert = int(get(f"{arch}.expert_count", 0) or 0)
    n_used = int(get(f"{arch}.expert_used_count", 0) or 0)
    if n_expert > MAX_EXPERTS or not 0 <= n_used <= max(n_expert, 0):
        raise ReplayerError(f"{path}: expert_count {n_expert:,} / used {n_used:,}; llama.cpp loads at most "
                            f"{MAX_EXPERTS} experts and uses no more than it has (damaged header)")
    if t.expert_params and (n_expert < 1 or not 0 < n_used <= n_expert):
        raise ReplayerError(f"{path}: expert tensors but expert_count {n_expert} / used {n_used} (damaged header)")
    return GGUFModel(
        path=path, arch=arch, name=str(get("general.name", Path(path).stem)), n_layer=n_layer, n_embd=n_embd,
        n_head=n_head, n_head_kv=n_head_kv, head_dim_k=head_k, head_dim_v=head_v,
        n_ctx_train=int(get(f"{arch}.context_length", 0) or 0), n_swa=n_swa, swa_layers=swa_layers,
        recurrent_layers=recurrent, n_expert=n_expert, n_expert_used=n_used,
        file_type=_quant_name(get("general.file_type")), weight_bytes=t.weight_bytes, expert_bytes=t.expert_bytes,
        params=t.params, expert_params=t.expert_params, matmul_params=t.matmul_params, matmul_bytes=t.matmul_bytes,
        state_floats_per_layer=state, has_chat_template=get("tokenizer.chat_template") is not None,
        n_vocab=n_vocab,
    )


def _check_heads(path: str, arch: str, n_head: tuple[int, ...], n_head_kv: tuple[int, ...],
                 recurrent: tuple[bool, ...]) -> None:
    """An attention layer needs heads (llama.cpp divides by them: ``n_embd_head_k = n_embd / n_head``,
    llama-model.cpp); ``head_count = 0`` gave a model with no attention cost and absurd speeds."""
    for i, (h, kv, rec) in enumerate(zip(n_head, n_head_kv, recurrent)):
        if rec:
            continue
        if h <= 0 or kv <= 0 or kv > h:
            raise ReplayerError(f"{path}: layer {i} has {arch}.attention.head_count {h} and head_count_kv {kv}: "
                                "an attention layer needs 1 ≤ head_count_kv ≤ head_count (damaged header)")


def _identity(path: str, reader: Any, get: Callable[..., Any]) -> tuple[str, int, int, int]:
    """(arch, layers, embedding width, vocabulary size), refusing what llama-server cannot chat with."""
    arch = get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise ReplayerError(f"{path} has no general.architecture: not a model GGUF")
    if arch in NOT_LM_ARCHS:
        raise ReplayerError(f"{path} is a {arch!r} GGUF, not a language model llama-server can chat with")
    n_layer = get(f"{arch}.block_count")
    n_embd = get(f"{arch}.embedding_length")
    if not n_layer or not n_embd:
        raise ReplayerError(f"{path} has no {arch}.block_count / embedding_length: not a language model")
    if not 1 <= int(n_layer) <= MAX_LAYERS:
        raise ReplayerError(f"{path}: {arch}.block_count is {int(n_layer):,}; llama.cpp loads 1 to {MAX_LAYERS} "
                            "layers (damaged header)")
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    if tokens is None:
        raise ReplayerError(f"{path} has no tokenizer vocabulary: not a language model llama-server can serve")
    return arch, int(n_layer), int(n_embd), len(tokens.data)


def _recurrent_layers(arch: str, get: Callable[..., Any], n_layer: int, n_head_kv: tuple[int, ...]) -> tuple[bool, ...]:
    """Which layers keep a recurrent state (``llm_arch_is_recurrent`` / ``llm_arch_is_hybrid``
    and the arch's own layer pattern)."""
    if arch in RECURRENT_ARCHS:
        return (True,) * n_layer
    if arch in ("qwen3next", "qwen35", "qwen35moe"):
        interval = int(get(f"{arch}.full_attention_interval", 4) or 4)
        return tuple((i + 1) % interval != 0 for i in range(n_layer))
    if arch == "falcon-h1":
        return (True,) * n_layer
    if arch in HYBRID_ARCHS:
        return tuple(h == 0 for h in n_head_kv)
    return (False,) * n_layer


def _sliding_window(arch: str, get: Callable[..., Any], n_layer: int,
                    recurrent: tuple[bool, ...]) -> tuple[int, tuple[bool, ...]]:
    """(n_swa, which layers slide), as the arch's load_hparams decides; (0, none) without a window."""
    n_swa, swa_layers = 0, (False,) * n_layer
    if arch not in SWA_ARCHS:
        return n_swa, swa_layers
    default, period = SWA_ARCHS[arch]
    key = get(f"{arch}.attention.sliding_window")
    value = int(key) if key is not None else default
    if not (value and value > 0):
        return n_swa, swa_layers
    pattern = get(f"{arch}.attention.sliding_window_pattern")
    if isinstance(pattern, list):
        swa_layers = tuple(bool(x) for x in pattern[:n_layer])
    elif arch == "lfm2":
        swa_layers = tuple(not r for r in recurrent)
    else:
        period = int(pattern) if pattern is not None else period
        swa_layers = tuple(period == 0 or i % period < period - 1 for i in range(n_layer))
    return value, swa_layers


def _state_floats(arch: str, get: Callable[..., Any], n_embd: int) -> int:
    """Recurrent state per layer: n_embd_r + n_embd_s (src/llama-hparams.cpp)."""
    wkv = int(get(f"{arch}.wkv.head_size", 0) or 0)
    l_cache = int(get(f"{arch}.shortconv.l_cache", 0) or 0)
    d_conv = int(get(f"{arch}.ssm.conv_kernel", 0) or 0)
    d_inner = int(get(f"{arch}.ssm.inner_size", 0) or 0)
    d_state = int(get(f"{arch}.ssm.state_size", 0) or 0)
    n_group = int(get(f"{arch}.ssm.group_count", 0) or 0)
    if wkv:
        return int(get(f"{arch}.token_shift_count", 2) or 2) * n_embd + n_embd * wkv
    if l_cache:
        return n_embd * (l_cache - 1)
    return max(d_conv - 1, 0) * (d_inner + 2 * n_group * d_state) + d_state * d_inner


class _Tensors(NamedTuple):
    weight_bytes: int
    expert_bytes: int
    params: int
    expert_params: int
    matmul_params: int
    matmul_bytes: int


def _tensor_table(path: str, reader: Any) -> _Tensors:
    """Bytes and parameters, routed experts apart, and what every call multiplies (the token
    embedding is a row lookup unless it doubles as the output); no tensor data is touched."""
    weight = expert_b = params = expert_p = mm_p = mm_b = 0
    has_output = any(t.name == "output.weight" for t in reader.tensors)
    for t in reader.tensors:
        n, b = int(t.n_elements), int(t.n_bytes)
        weight += b
        params += n
        if EXPERT_MARK in t.name:
            expert_b += b
            expert_p += n
        elif t.name != "token_embd.weight" or not has_output:
            if len(t.shape) >= 2:
                mm_p += n
                mm_b += b
    if weight == 0:
        raise ReplayerError(f"{path} holds no tensors: not a model GGUF")
    return _Tensors(weight, expert_b, params, expert_p, mm_p, mm_b)
