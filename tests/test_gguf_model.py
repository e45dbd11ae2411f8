"""Model profiles from GGUF headers: tiny real GGUFs, and header-only GGUFs of real model shapes.

The header-only files declare full-size tensors over a sparse hole (no bytes on disk): a
30B MoE and the seed's Qwen3.6-35B-A3B hybrid. Their profiles are checked against numbers
published independently of this code (the calibration table's architecture constants, the
checkpoint size in llama.cpp #24056), and reading them must not touch the weights.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import orjson
import pytest

from replayer.core.compare import compare
from replayer.core.errors import ReplayerError
from replayer.core.hardware import cost, gguf_model, presets
from replayer.core.replay import ReplayConfig, all_simulated, prepare
from replayer.core.tiny_models import make_tiny

from conftest import FIXTURES, REPO
from helpers import agent_conversation

MEMORY = {"llama": ("plain", "kv"), "gemma2": ("swa", "iswa"), "lfm2": ("recurrent", "hybrid"),
          "mamba": ("recurrent", "recurrent")}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    return {arch: make_tiny(arch, d / f"{arch}.gguf") for arch in MEMORY}


def header_only_gguf(path: Path, arch: str, kv: dict, tensors: list[tuple[str, tuple[int, ...]]]) -> Path:
    """A GGUF whose F16 tensors are declared but never written: the data region is a sparse hole."""
    import gguf

    w = gguf.GGUFWriter(str(path), arch)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(["a", "b", "<|im_start|>", "<|im_end|>"])
    for key, value in kv.items():
        k = key.format(arch=arch)
        if isinstance(value, list):
            w.add_array(k, value)
        elif isinstance(value, int):
            w.add_uint32(k, value)
        else:
            w.add_string(k, value)
    total = 0
    for name, shape in tensors:
        nbytes = int(np.prod(shape)) * 2
        w.add_tensor_info(name, shape, np.dtype(np.float16), nbytes, raw_dtype=gguf.GGMLQuantizationType.F16)
        total += gguf.GGUFWriter.ggml_pad(nbytes, w.data_alignment)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()
    start = gguf.GGUFWriter.ggml_pad(path.stat().st_size, w.data_alignment)
    os.truncate(path, start + total)
    return path


def qwen3_30b_a3b(path: Path) -> Path:
    """Qwen3-30B-A3B's shapes (48 layers, 128 experts, 8 used, GQA 32/4, head 128)."""
    L, d, ff_e, E = 48, 2048, 768, 128
    t = [("token_embd.weight", (151936, d)), ("output_norm.weight", (d,)), ("output.weight", (151936, d))]
    for i in range(L):
        p = f"blk.{i}."
        t += [(p + "attn_norm.weight", (d,)), (p + "attn_q.weight", (4096, d)), (p + "attn_k.weight", (512, d)),
              (p + "attn_v.weight", (512, d)), (p + "attn_output.weight", (d, 4096)),
              (p + "ffn_norm.weight", (d,)), (p + "ffn_gate_inp.weight", (E, d)),
              (p + "ffn_gate_exps.weight", (E, ff_e, d)), (p + "ffn_up_exps.weight", (E, ff_e, d)),
              (p + "ffn_down_exps.weight", (E, d, ff_e))]
    kv = {"{arch}.block_count": L, "{arch}.embedding_length": d, "{arch}.context_length": 40960,
          "{arch}.attention.head_count": 32, "{arch}.attention.head_count_kv": 4, "{arch}.attention.key_length": 128,
          "{arch}.attention.value_length": 128, "{arch}.expert_count": E, "{arch}.expert_used_count": 8}
    return header_only_gguf(path, "qwen3moe", kv, t)


def qwen36_35b_a3b(path: Path) -> Path:
    """Qwen3.6-35B-A3B's hybrid layout: 40 layers, every 4th full attention, gated delta nets between."""
    L, d = 40, 2048
    t = [("token_embd.weight", (248320, d)), ("output.weight", (248320, d))]
    for i in range(L):
        p = f"blk.{i}."
        t += [(p + "ffn_gate_exps.weight", (256, 512, d)), (p + "ffn_up_exps.weight", (256, 512, d)),
              (p + "ffn_down_exps.weight", (256, d, 512))]
        if (i + 1) % 4:
            t += [(p + "attn_qkv.weight", (8192, d)), (p + "ssm_out.weight", (d, 4096))]
        else:
            t += [(p + "attn_q.weight", (8192, d)), (p + "attn_k.weight", (512, d)), (p + "attn_v.weight", (512, d)),
                  (p + "attn_output.weight", (d, 4096))]
    kv = {"{arch}.block_count": L, "{arch}.embedding_length": d, "{arch}.context_length": 262144,
          "{arch}.attention.head_count": 16, "{arch}.attention.head_count_kv": 2, "{arch}.attention.key_length": 256,
          "{arch}.attention.value_length": 256, "{arch}.expert_count": 256, "{arch}.expert_used_count": 8,
          "{arch}.full_attention_interval": 4, "{arch}.ssm.conv_kernel": 4, "{arch}.ssm.inner_size": 4096,
          "{arch}.ssm.state_size": 128, "{arch}.ssm.group_count": 16, "{arch}.ssm.time_step_rank": 32}
    return header_only_gguf(path, "qwen35moe", kv, t)


# -- the tiny GGUFs the live tests serve ----------------------------------------------------------

@pytest.mark.parametrize("arch", list(MEMORY))
def test_tiny_profiles(tiny, arch):
    m = gguf_model.read(tiny[arch])
    assert (m.memory, m.kind_label) == MEMORY[arch]
    assert m.arch == arch and m.n_layer == 2 and m.n_embd == 64 and m.n_ctx_train == 262144
    assert m.n_expert == 0 and m.file_type == "ALL_F32" and m.has_chat_template
    assert 0 < m.weight_bytes < tiny[arch].stat().st_size  # every tensor byte, not the header
    if arch == "gemma2":
        assert m.n_swa == 256 and m.swa_layers == (True, False)  # gemma2: every 2nd layer is global
    else:
        assert m.n_swa == 0 and not any(m.swa_layers)
    assert m.recurrent_layers == {"llama": (False, False), "gemma2": (False, False), "lfm2": (True, False),
                                  "mamba": (True, True)}[arch]
    assert (m.checkpoint_mib() > 0) == (arch != "llama")


def test_plain_gguf_never_checkpoints_whatever_the_preset(tiny):
    """The issue's case: a plain-KV model simulated with the preset's hybrid memory got checkpoints."""
    msgs, tools = agent_conversation(rounds=20)
    f = Path(str(tiny["llama"])).with_name("conv.json")
    f.write_bytes(orjson.dumps({"messages": msgs, "tools": tools}))
    prep = prepare(f, ReplayConfig(model=str(tiny["llama"]), gpu="cpu"))
    assert prep.layouts["A"].tokenizer == f"gguf:{gguf_model.read(tiny['llama']).path}"  # its own vocabulary
    cmp = compare(all_simulated(prep))
    assert cmp.a.created == [] and cmp.b.created == []
    gemma = compare(all_simulated(prepare(f, ReplayConfig(model=str(tiny["gemma2"]), gpu="cpu"))))
    assert len(gemma.a.created) >= 1 and {c.size_mib for c in gemma.a.created} == {
        gguf_model.read(tiny["gemma2"]).checkpoint_mib()}


# -- header-only files of real shapes -------------------------------------------------------------

def test_moe_header_matches_the_published_architecture_and_reads_no_weights(tmp_path):
    f = qwen3_30b_a3b(tmp_path / "qwen3-30b-a3b-f16.gguf")
    assert f.stat().st_size > 60e9 and f.stat().st_blocks * 512 < 50e6  # a sparse 61 GB file
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    m = gguf_model.read(f)
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 200  # the 61 GB of weights stayed on disk
    assert (m.memory, m.n_expert, m.n_expert_used, m.file_type) == ("plain", 128, 8, "F16")
    ref = presets.calibration().models["qwen3_30B_A3B_Q8_0"]  # perf-model §4, from the model card
    c = m.constants()
    for key in ("L", "E", "k", "att", "kv"):
        assert getattr(c, key) == getattr(ref, key), key
    assert c.N_e_tot == pytest.approx(ref.N_e_tot, rel=0.01)
    assert c.N_e_act == pytest.approx(ref.N_e_act, rel=0.01)
    assert m.weight_bytes == pytest.approx(2 * m.params) and c.W_e == pytest.approx(2 * c.N_e_tot)


def test_hybrid_header_gives_the_servers_checkpoint_size(tmp_path):
    """Qwen3.6-35B-A3B: the server logs 62.813 MiB checkpoints (llama.cpp #24056)."""
    m = gguf_model.read(qwen36_35b_a3b(tmp_path / "qwen36.gguf"))
    assert (m.memory, m.kind_label, sum(m.recurrent_layers)) == ("recurrent", "hybrid", 30)
    assert f"{m.checkpoint_mib():.3f}" == "62.813"  # the server's %.3f
    c = m.constants()
    ref = presets.calibration().models["qwen35_35B_A3B_Q8_0"]
    assert c.hybrid and (c.L, c.E, c.k, c.att, c.kv) == (ref.L, ref.E, ref.k, ref.att, ref.kv)


def test_offload_when_the_gguf_does_not_fit(tmp_path):
    mp = presets.model(str(qwen3_30b_a3b(tmp_path / "moe.gguf")))
    assert cost.host_bytes(presets.gpu("rtx4090"), mp) > 30e9  # 61 GB of F16 on a 24 GB card
    assert cost.host_bytes(presets.gpu("h100"), mp) == 0
    assert cost.host_bytes(presets.gpu("m3-ultra"), mp) == 0  # unified memory
    spill = cost.cost_model(presets.gpu("rtx4090"), mp)
    fits = cost.cost_model(presets.gpu("h100"), mp)
    assert spill.ubatch_ms(512, 0) > 5 * fits.ubatch_ms(512, 0)  # PCIe streaming dominates


# -- bad files: one clear line ---------------------------------------------------------------------

def _replay_cli(conv: Path, model: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "replayer.cli", "replay", str(conv), "--model", str(model)],
                          capture_output=True, text=True, cwd=REPO)


@pytest.mark.parametrize("kind", ["truncated", "garbage", "clip", "no-vocab", "missing"])
def test_bad_gguf_is_one_clear_line(tiny, tmp_path, kind):
    f = tmp_path / f"{kind}.gguf"
    if kind == "truncated":
        data = tiny["llama"].read_bytes()
        f.write_bytes(data[: len(data) // 3])
    elif kind == "garbage":
        f.write_bytes(b"GGUF" + os.urandom(4000))
    elif kind == "clip":
        header_only_gguf(f, "clip", {"{arch}.block_count": 2}, [("v.patch_embd.weight", (64, 64))])
    elif kind == "no-vocab":
        import gguf

        w = gguf.GGUFWriter(str(f), "llama")
        w.add_block_count(1)
        w.add_embedding_length(8)
        w.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    before = f.read_bytes() if f.exists() else None
    with pytest.raises(ReplayerError) as err:
        gguf_model.read(f)
    assert "\n" not in str(err.value) and str(f.name) in str(err.value)
    r = _replay_cli(FIXTURES / "pi/small-v3.jsonl", f)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert (f.read_bytes() if f.exists() else None) == before  # never modified
