"""A run that failed before its prefill finished reports what it measured (issue 24): the
tokens its batches processed, not the whole prompt, and no throughput."""

from __future__ import annotations

from replayer.core.engine.run_summary import RunSummary
from replayer.core.engine import events as ev


def _run(fail: bool) -> RunSummary:
    evs = [ev.RunStarted("A", "A", "b9859", "G1", "live", n_tokens=10_000),
           ev.BatchDone("A", 0, 0, 2048, 4, "n_batch", 0.0, 500.0),
           ev.BatchDone("A", 1, 2048, 1000, 2, "n_batch", 500.0, 800.0)]
    if fail:
        evs.append(ev.RunFailed("A", "the server exited (signal 9)", t_ms=900.0))
    return RunSummary.from_events("A", evs)


def test_failed_run_reports_measured_tokens_and_no_throughput():
    d = _run(fail=True).to_dict()
    assert d["n_tokens"] == 3048 and d["n_tokens_prompt"] == 10_000
    assert d["tokens_per_s"] is None and d["status"].startswith("failed:")
