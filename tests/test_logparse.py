"""The log parser on every line variant llama-server prints (spec §10)."""

from __future__ import annotations

import pytest

from replayer.core.engine.logparse import memory_kind, parse_line

CASES = [
    ("0.00.149.519 I slot   operator(): id  0 | task 0 | cached n_tokens = 867, memory_seq_rm [867, end)",
     "batch_start", (867,), 0, None),
    ("0.00.149.519 I slot update_slots: id  0 | task 3 | cached n_tokens = 2048, memory_seq_rm [2048, end)",
     "batch_start", (2048,), 3, None),
    ("slot update_slots: id  0 | task 3 | n_tokens = 512, memory_seq_rm [512, end)", "batch_start", (512,), 3, None),
    ("[51001] 13.30.533.725 I slot print_timing: id  0 | task 18 | prompt eval time =  698035.65 ms / 91463 tokens "
     "(    7.63 ms per token,   131.03 tokens per second)", "prompt_eval", (698035.65, 91463), 18, 51001),
    ("\x1b[32m0.03.012.796 I slot create_check: id  0 | task 0 | created context checkpoint 1 of 32 "
     "(pos_min = 9799, pos_max = 9799, n_tokens = 9800, size = 0.019 MiB)\x1b[0m",
     "created", (1, 32, 9799, 9799, 9800, 0.019), 0, None),
    ("0.01.012.345 W slot create_check: id  0 | task 2 | erasing old context checkpoint (pos_min = 899, pos_max = 899, "
     "n_tokens = 900, size = 0.019 MiB)", "erased", ("old", 899, 899, 900), 2, None),
    ("I slot create_check: id  0 | task 1 | erasing context checkpoint too close to an earlier one (pos_min = 9799, "
     "pos_max = 9799, n_tokens = 9800, size = 62.813 MiB)", "erased", ("too_close", 9799, 9799, 9800), 1, None),
    ("I slot create_check: id  0 | task 1 | superseding context checkpoint at n_tokens = 9996", "erased",
     ("superseded", -1, -1, 9996), 1, None),
    ("W slot launch_slot_: id  0 | task 1 | restored context checkpoint (pos_min = 9799, pos_max = 9799, "
     "n_tokens = 9800, n_past = 9800, size = 0.019 MiB)", "restored", (9799, 9799, 9800, 9800), 1, None),
    ("I slot launch_slot_: id  0 | task 1 | erased invalidated context checkpoint (pos_min = 9995, pos_max = 9995, "
     "n_tokens = 9996, n_swa = 0, pos_next = 9800, size = 0.019 MiB)", "erased", ("invalidated", 9995, 9995, 9996), 1, None),
    ("0.00.149.504 I slot   operator(): id  0 | task 0 | new prompt, n_ctx_slot = 16384, n_keep = 0, "
     "task.n_tokens = 12208", "new_prompt", (12208,), 0, None),
]


@pytest.mark.parametrize("line,kind,values,task,port", CASES, ids=[c[1] + str(i) for i, c in enumerate(CASES)])
def test_line_variants(line, kind, values, task, port):
    f = parse_line(line)
    assert f is not None and f.kind == kind and f.values == values and f.task == task and f.port == port


def test_timestamps_and_noise():
    assert parse_line("13.30.533.725 I slot print_timing: id  0 | task 1 | prompt eval time = 1.0 ms / 5 tokens").ts_ms == \
        pytest.approx((13 * 60 + 30) * 1000 + 533.725)
    assert parse_line("0.00.011.615 I llama_kv_cache_iswa: creating SWA KV cache, size = 768 cells") is None
    assert parse_line("") is None

def test_memory_kind_from_startup_logs():
    assert memory_kind(["0.00.01 I print_info: n_swa                 = 0",
                        "0.00.02 I llama_kv_cache: size =    2.00 MiB (  4096 cells,   2 layers,  1/1 seqs)"]) == ("plain", None)
    assert memory_kind(["I print_info: n_swa                 = 256", "I llama_kv_cache: size = 1 MiB"]) == ("swa", 256)
    assert memory_kind(["I print_info: n_swa = 0", "I llama_kv_cache: size = 1.00 MiB",
                        "I llama_memory_recurrent: size =    0.00 MiB (     1 cells,   2 layers)"]) == ("recurrent", None)
    assert memory_kind(["unrelated"]) == (None, None)
