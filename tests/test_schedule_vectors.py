"""Every schedule test vector of the spec, reproduced exactly (most verified on real builds)."""

from __future__ import annotations

import orjson
import pytest

from replayer.core.builds.catalog import parse_build
from replayer.core.engine.schedule import Knobs, PromptSpans, Slot, schedule

from conftest import SPEC, need_shared

VECTORS_FILE = SPEC / "prefill_test_vectors.json"


def _vectors():
    if not VECTORS_FILE.exists():
        return [pytest.param(None, id="vectors-missing")]
    data = orjson.loads(VECTORS_FILE.read_bytes())
    return [pytest.param(v, id=v["id"]) for v in data["vectors"]]


def _knobs(v) -> Knobs:
    kw = dict(n_batch=v["n_batch"], n_ubatch=v["n_ubatch"], n_ctx_checkpoints=v["n_ctx_checkpoints"],
              checkpoint_min_step=v["min_step"], memory=v["memory"])
    if "n_swa" in v:
        kw["n_swa"] = v["n_swa"]
    return Knobs(**kw)


def _pairs(batches):
    return [[b.start, b.end] for b in batches]


@pytest.mark.parametrize("vec", _vectors())
def test_vector(vec):
    need_shared(VECTORS_FILE)
    build = parse_build(vec["gen"])
    knobs = _knobs(vec)
    if "requests" not in vec:
        spans = PromptSpans.of(vec["N"], vec["user_starts"])
        s = schedule(spans, build, knobs, n_past=vec.get("n_past", 0))
        assert _pairs(s.batches) == vec["expected_batches"]
        assert [[c.n_tokens, c.pos_min, c.pos_max] for c in s.checkpoints] == vec["expected_checkpoints"]
        if "size_swa" in vec:
            assert knobs.size_swa == vec["size_swa"]
        return

    a_req, b_req = vec["requests"]
    slot = Slot(build, knobs)
    a = slot.run(PromptSpans.of(a_req["N"], a_req["user_starts"]))
    exp = vec["expected"]
    if "A_batches" in exp:
        assert _pairs(a.batches) == exp["A_batches"]
        assert [c.n_tokens for c in a.checkpoints] == exp["A_checkpoints"]
        assert [c.n_tokens for c in a.final_list] == exp["A_final_list"]
    identical = "again" in b_req["tokens"]
    # B shares [0, 9900) with A in the resume vectors, everything in the re-send ones
    common = b_req["N"] if identical else 9900
    b = slot.run(PromptSpans.of(b_req["N"], b_req["user_starts"]), common_prefix=common)
    assert b.n_past == exp["B_n_past"]
    assert (b.restored.n_tokens if b.restored else None) == exp["B_restored_checkpoint"]
    assert _pairs(b.batches) == exp["B_batches"]
    assert [c.n_tokens for c in b.checkpoints] == exp["B_checkpoints"]
    assert [c.n_tokens for c in b.final_list] == exp["B_final_list"]
    if "B_evicted_at_creation" in exp:
        evicted = [e.checkpoint.n_tokens for e in b.erased if e.reason != "invalidated"]
        assert evicted == exp["B_evicted_at_creation"]
