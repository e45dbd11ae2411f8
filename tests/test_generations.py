"""Generations are data: the scheduler reads each record, and a new one is one record plus its vectors."""

from __future__ import annotations

import dataclasses

import orjson
import pytest

from replayer.core.builds import catalog
from replayer.core.builds.catalog import GENERATIONS, Generation, parse_build
from replayer.core.engine.schedule import Knobs, PromptSpans, schedule

from conftest import SPEC

#: a generation that never existed: G1's breaks at every user start, min-step spacing only,
#: superseding duplicates, min step 4096, from b12000 on
FAKE = Generation("G4", "test: every-user breaks, strict spacing", 12000, None, 12000, None,
                  "every_user", "min_step", supersede=True, default_checkpoint_min_step=4096, aliases=("fake",))

#: its vectors, worked out by hand from the record (N 10000, user starts 3000/6000/9000, -b 2048 -ub 512)
FAKE_VECTORS = [
    ("plain", [(0, 2048, "n_batch"), (2048, 3000, "user_start"), (3000, 5048, "n_batch"),
               (5048, 6000, "user_start"), (6000, 8048, "n_batch"), (8048, 9000, "user_start"),
               (9000, 10000, "prompt_end")], []),
    # near-end cuts at 10000-516 and 10000-4; checkpoints at user starts more than 4096 past the last
    ("recurrent", [(0, 2048, "n_batch"), (2048, 3000, "user_start"), (3000, 5048, "n_batch"),
                   (5048, 6000, "user_start"), (6000, 8048, "n_batch"), (8048, 9000, "user_start"),
                   (9000, 9484, "checkpoint_offset"), (9484, 9996, "checkpoint_offset"),
                   (9996, 10000, "prompt_end")], [3000, 9000]),
]


@pytest.fixture
def fake_generation(monkeypatch):
    monkeypatch.setattr(catalog, "GENERATIONS", [*catalog.GENERATIONS, FAKE])
    return FAKE


@pytest.mark.parametrize("memory,batches,checkpoints", FAKE_VECTORS)
def test_a_new_generation_is_one_record(fake_generation, memory, batches, checkpoints):
    build = parse_build("12500")
    assert build.generation is FAKE and "newer than the last examined" in build.note
    assert parse_build("fake").generation is FAKE and parse_build("11500").generation is Generation.G3
    s = schedule(PromptSpans.of(10000, [3000, 6000, 9000]), build, Knobs(memory=memory))
    assert [(b.start, b.end, b.reason) for b in s.batches] == batches
    assert [c.n_tokens for c in s.checkpoints] == checkpoints


def test_the_record_drives_the_scheduler(fake_generation):
    """Change one field of the record and only what that field governs changes."""
    spans, knobs = PromptSpans.of(10000, [3000, 6000, 9000]), Knobs(memory="recurrent")
    near_end = dataclasses.replace(FAKE, spacing="min_step_or_last_user_or_near_end")
    s = schedule(spans, catalog.Build(near_end), knobs)
    assert [c.n_tokens for c in s.checkpoints] == [3000, 9000, 9484, 9996]
    due = dataclasses.replace(FAKE, user_breaks="where_checkpoint_due")
    s = schedule(spans, catalog.Build(due), knobs)
    assert [b.end for b in s.batches][:3] == [2048, 3000, 5048]  # the first user start is due, 6000 is not
    assert 6000 not in [b.end for b in s.batches]


def test_the_cli_knows_a_new_generation(fake_generation, capsys):
    from replayer.cli import main

    assert main(["schedule", "--tokens", "10000", "--user-starts", "3000,6000,9000", "--build", "12500",
                 "--json"]) == 0
    out = orjson.loads(capsys.readouterr().out)
    assert out["generation"] == "G4" and len(out["batches"]) == 7


@pytest.mark.parametrize("gen", GENERATIONS, ids=lambda g: g.name)
def test_every_generation_of_the_catalog(gen):
    """Each record parses by name and by its representative build, and keeps its build range."""
    assert parse_build(gen.name).generation is gen
    assert parse_build(str(gen.representative_build)).generation is gen
    assert gen.first_build <= gen.representative_build and (gen.last_build is None or
                                                            gen.representative_build <= gen.last_build)
    for alias in gen.aliases:
        assert parse_build(alias).generation is gen


@pytest.mark.parametrize("gen", GENERATIONS, ids=lambda g: g.name)
def test_every_generation_has_spec_vectors(gen):
    f = SPEC / "prefill_test_vectors.json"
    if not f.exists():
        pytest.skip(f"{f} not present")
    names = {parse_build(v["gen"]).generation.name for v in orjson.loads(f.read_bytes())["vectors"]}
    assert gen.name in names
