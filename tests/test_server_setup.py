"""The server setup from a real command line / router preset, on a real build's ``--help``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from replayer.core.errors import ReplayerError
from replayer.core.server.help import SHIPPED, ServerHelp, parse_help
from replayer.core.server.setup import from_preset, parse_server_args, read_preset

HELP_TEXT = (Path(__file__).parent / "data" / "llama_server_help_b9859.txt").read_text()


@pytest.fixture(scope="module")
def h9859() -> ServerHelp:
    return parse_help(HELP_TEXT, 9859, "b9859 llama-server --help")


def test_help_defaults_are_the_builds_own(h9859):
    d = h9859.defaults
    # the values b9859 prints (its README's table still says -cms 256: the help is the reference)
    assert d["n_parallel"] == -1 and d["kv_unified"] == "auto"
    assert d["cache_ram_mib"] == 8192 and d["cache_idle_slots"] is True
    assert d["n_ctx_checkpoints"] == 32 and d["checkpoint_min_step"] == 8192
    assert d["slot_prompt_similarity"] == pytest.approx(0.10)
    assert (d["n_ctx"], d["n_batch"], d["n_ubatch"], d["swa_full"], d["cache_reuse"]) == (0, 2048, 512, False, 0)
    assert d["sleep_idle_seconds"] == -1 and d["models_max"] == 4
    assert h9859.by_name["--no-kv-unified"].negatives == ("-no-kvu", "--no-kv-unified")
    assert h9859.by_env["LLAMA_ARG_CACHE_RAM"].names == ("-cram", "--cache-ram")


def test_shipped_help_round_trips(h9859):
    shipped = json.loads(SHIPPED.read_text())["builds"]
    back = ServerHelp.from_json(9859, shipped["9859"])
    assert back.defaults == h9859.defaults
    assert set(back.by_name) == set(h9859.by_name)


def test_defaults_resolve_like_the_server(h9859):
    s = parse_server_args("", h9859)
    assert (s.n_parallel, s.kv_unified, s.cache_ram_mib, s.cache_idle_slots) == (4, True, 8192, True)
    one = parse_server_args("llama-server -m /m.gguf -np 1 --cache-ram 0", h9859)
    assert (one.n_parallel, one.kv_unified, one.cache_ram_mib, one.cache_idle_slots) == (1, False, 0, False)
    assert one.model == "/m.gguf" and one.given == {"n_parallel": 1, "cache_ram_mib": 0}
    two = parse_server_args(["-np", "2", "--no-kv-unified", "-c", "8192", "--cache-ram=3"], h9859)
    assert (two.n_parallel, two.kv_unified, two.cache_ram_mib, two.n_ctx_slot) == (2, False, 3, 4096)
    uni = parse_server_args("-np 2 -kvu -c 8192", h9859)
    assert uni.kv_unified and uni.n_ctx_slot == 8192
    auto = parse_server_args("--no-kv-unified", h9859)
    assert auto.kv_unified and any("no effect" in n for n in auto.notes)


def test_replayers_own_flags_are_dropped_with_a_note(h9859):
    s = parse_server_args("--host 0.0.0.0 --port 9000 -lv 1 -np 1", h9859)
    assert s.args == ["-np", "1"]
    assert len(s.notes) == 3 and all("replayer's own" in n for n in s.notes)


def test_unknown_flags_are_named(h9859):
    with pytest.raises(ReplayerError, match=r"does not know --frobnicate, -zz"):
        parse_server_args("-np 2 --frobnicate -zz 3 extra", h9859)
    with pytest.raises(ReplayerError, match="needs a value"):
        parse_server_args("-np", h9859)
    with pytest.raises(ReplayerError, match="not a number"):
        parse_server_args("--cache-ram lots", h9859)
    with pytest.raises(ReplayerError, match="No closing quotation"):
        parse_server_args("-m 'x", h9859)


def test_router_preset_globals_then_model_then_command_line(tmp_path, h9859):
    ini = tmp_path / "models.ini"
    ini.write_text("version = 1\n[*]\nc = 8192\ncache-ram = 16\nkv-unified = false\n"
                   "[tiny]\nmodel = /m.gguf\nLLAMA_ARG_CACHE_RAM = 4\nparallel = 2\nload-on-startup = true\n")
    section, name = read_preset(ini)
    assert name == "tiny" and section["c"] == "8192" and section["LLAMA_ARG_CACHE_RAM"] == "4"
    s = from_preset(ini, h9859, command_line="--ctx-checkpoints 4")
    assert (s.n_ctx, s.cache_ram_mib, s.n_parallel, s.kv_unified, s.n_ctx_checkpoints) == (8192, 4, 2, False, 4)
    assert s.model == "/m.gguf"
    ini.write_text("[*]\nc = 1\n[a]\nmodel=x\n[b]\nmodel=y\n")
    with pytest.raises(ReplayerError, match=r"2 model sections \(a, b\)"):
        read_preset(ini)
    with pytest.raises(ReplayerError, match=r"no section \[c\]"):
        read_preset(ini, "c")
    ini.write_text("[m]\nwarp-drive = 9\n")
    with pytest.raises(ReplayerError, match="does not know warp-drive"):
        from_preset(ini, h9859)
