"""``--model M.gguf`` simulated against the same GGUF served by real builds (b9859, b10001).

The simulated run reads only the GGUF's header (memory kind, sliding window, recurrent
layers), its vocabulary and its chat template; the live run asks the server. Both must cut
the prompt into the same batches and checkpoint at the same places.
"""

from __future__ import annotations

import subprocess
import sys

import orjson
import pytest

from replayer.core.builds import manager
from replayer.core.tiny_models import make_tiny

from conftest import REPO
from helpers import agent_conversation

pytestmark = pytest.mark.live
ARCHS = ("llama", "gemma2", "lfm2", "mamba")


@pytest.fixture(scope="module")
def builds():
    return {b: manager.install(b, "cpu").binary for b in (9859, 10001)}


@pytest.fixture(scope="module")
def conversation(tmp_path_factory):
    msgs, tools = agent_conversation(rounds=40)
    assert sum(1 for m in msgs if m["role"] == "tool") == 40
    f = tmp_path_factory.mktemp("conv") / "agent-40-rounds.json"
    f.write_bytes(orjson.dumps({"messages": msgs, "tools": tools}))
    return f


def _replay(conv, model, *extra) -> dict:
    r = subprocess.run([sys.executable, "-m", "replayer.cli", "replay", str(conv), "--a", "9859", "--b", "10001",
                        "--model", str(model), "-ub", "512", *extra, "--json"], capture_output=True, cwd=REPO,
                       timeout=900)
    assert r.returncode == 0, r.stderr.decode()
    return orjson.loads(r.stdout)


def _tiny(arch: str, template: str, path):
    """The tiny model with replayer's ChatML template, or with Qwen2.5-7B-Instruct's (from the
    sdist, with the real Qwen2 vocabulary): that one renders tool-call arguments with ``tojson``,
    so the layout is right only when arguments are rendered as the server passes them."""
    if template == "chatml":
        return make_tiny(arch, path)
    models = manager.sdist_models_dir(9859)
    src = (models / "templates" / "Qwen-Qwen2.5-7B-Instruct.jinja").read_text(encoding="utf-8")
    return make_tiny(arch, path, vocab=str(models / "ggml-vocab-qwen2.gguf"), chat_template=src)


@pytest.mark.parametrize("template", ["chatml", "qwen2.5"])
@pytest.mark.parametrize("arch", ARCHS)
def test_simulated_gguf_matches_the_live_server(builds, conversation, tmp_path, arch, template):
    model = _tiny(arch, template, tmp_path / f"{arch}-{template}.gguf")
    sim = _replay(conversation, model, "--gpu", "cpu")
    live = _replay(conversation, model, "--engine", "live")
    for s, lv in zip(sim["runs"], live["runs"]):
        assert lv["error"] is None
        assert s["n_tokens"] == lv["n_tokens"]
        assert [(b["start"], b["n_tokens"], b["reason"]) for b in s["batches"]] == [
            (b["start"], b["n_tokens"], b["reason"]) for b in lv["batches"]]
        assert [(c["n_tokens"], c["pos_min"], c["pos_max"]) for c in s["checkpoints"]] == [
            (c["n_tokens"], c["pos_min"], c["pos_max"]) for c in lv["checkpoints"]]
        if arch == "llama":
            assert s["checkpoints"] == []  # a plain KV cache never checkpoints
        else:
            assert s["checkpoints"]
            # the size the header predicts is the size the server copies
            sizes = {round(c["size_mib"], 3) for c in lv["checkpoints"]}
            assert {round(c["size_mib"], 3) for c in s["checkpoints"]} == sizes
