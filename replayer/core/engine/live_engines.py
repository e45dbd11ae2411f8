"""The live engines behind the one interface: a build started on a model, or a server already running.

``live.py`` drives the server; these wrappers give it a ``RunSpec`` and turn what it
keeps on the side (the layout the server made, its timings, the log's batch starts) into
``LayoutReady`` and ``ServerFacts`` events, so nothing leaves a live run except events.
"""

from __future__ import annotations

from typing import Iterator

from replayer.core.engine import events as ev
from replayer.core.engine.live import LiveResult, attach_events, installed_run_events
from replayer.core.runspec import LiveTarget, RunSpec


def _with_facts(run: str, stream: Iterator[ev.Event], result: LiveResult) -> Iterator[ev.Event]:
    """The stream, with the side channel's facts as events where they become known."""
    try:
        for e in stream:
            if isinstance(e, ev.RunFinished):
                yield ev.ServerFacts(run=run, timings=dict(result.timings),
                                     log_batch_starts=list(result.log_batch_starts), t_ms=e.t_ms)
            yield e
            if isinstance(e, ev.RunStarted) and result.layout is not None:
                lay = result.layout
                yield ev.LayoutReady(run=run, n_tokens=lay.n_tokens, user_starts=lay.user_starts,
                                     spans=[(s.role, s.start) for s in lay.spans], tokenizer=lay.tokenizer,
                                     template=lay.template, t_ms=e.t_ms)
    finally:
        stream.close()  # stops the server when the consumer stops early


class _ServerEngine:
    """A run on a real server: its stream, with the side channel's facts as events."""

    def events(self, spec: RunSpec, prepared) -> Iterator[ev.Event]:
        if spec.live is None:
            raise ValueError(f"run {spec.run} has no live target")  # a bug: run_spec always sets it
        result = LiveResult()
        return _with_facts(spec.run, self.stream(spec, spec.live, prepared.request.body, result), result)

    def stream(self, spec: RunSpec, t: LiveTarget, body: dict, result: LiveResult) -> Iterator[ev.Event]:
        raise NotImplementedError


class LiveEngine(_ServerEngine):
    """Starts the run's build on the model, on 127.0.0.1, and stops it afterwards."""

    name = "live"

    def stream(self, spec: RunSpec, t: LiveTarget, body: dict, result: LiveResult) -> Iterator[ev.Event]:
        return installed_run_events(spec.run, t.build_spec, t.backend, spec.knobs, t.model, body, ctx_size=t.ctx_size,
                                    request_timeout=t.timeout, result=result, settings=spec.settings,
                                    threads=t.threads)


class AttachEngine(_ServerEngine):
    """Replays against a server someone else started (its ``-b``/``-ub`` must be the spec's knobs)."""

    name = "attach"

    def stream(self, spec: RunSpec, t: LiveTarget, body: dict, result: LiveResult) -> Iterator[ev.Event]:
        return attach_events(spec.run, spec.build, spec.knobs, t.server or "", body, log_file=t.server_log,
                             label=spec.label, result=result, settings=spec.settings, timeout=t.timeout)
