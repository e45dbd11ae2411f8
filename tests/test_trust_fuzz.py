"""The fuzz harness of every untrusted input (benchmarks/fuzz_sessions.py) at a bounded size:
sessions, OpenCode storage folders, GGUF headers and templates; no crash, and every session
read in part carries its note in the replay's report."""

from __future__ import annotations

import sys

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks"))

from fuzz_sessions import run_fuzz  # noqa: E402


def test_bounded_fuzz_run(tmp_path):
    res = run_fuzz(240, work=tmp_path)
    c = res["counts"]
    assert res["crashes"] == {}, res["examples"]
    assert min(c.get(k, 0) for k in ("sessions", "storage", "gguf", "templates")) > 0, c
    assert c.get("incomplete", 0) == c.get("incomplete_noted", 0)
    # each case's peak near its input: a GGUF with a flipped layer count took 1.7 GB for a 0.6 MB
    # file. The traced heap is the case's own (deterministic); its largest excess over 4x the
    # input was 11.9 MiB, the replay of a 951 KB pi sample read in part (the estimator's
    # per-character arrays); with the estimator's blocks and the advice on the replay's request
    # it is ~6.5 MB (the rendered prompt: 4 bytes a character once one emoji is in it, and the
    # template's chunks beside it). Resident growth in a process that ran other cases first also
    # shows the allocator's history (arenas reused or newly mapped), so it keeps the wider bound.
    for row in res["rows"]:
        kind, size, heap, rss, worker = row[:5]
        assert heap <= 4 * size + (8 << 20), row
        assert max(rss, worker) <= 4 * size + (16 << 20), row
