"""``Replay``: one orchestrator for a replay of A and B in either mode.

Why: the resume mode ran through ``replay.replay`` while the session mode's A/B loop was
written out in the CLI (and again in the session screen), with its own export. ``Replay`` is
the one sequence for both — prepare, run A then B on the config's engine, finish, report —
so a front end chooses options and renders events; it does not sequence runs (the order of A and
B, pacing, pause and cancel are ``run_control``'s). The report of either mode goes through
``core/export.py`` (redacted).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from replayer.core import session_replay as sr
from replayer.core.replay import Outcome, Prepared, ReplayConfig, is_realtime, prepare, replay, report, run_events
from replayer.core.run_control import Controls, run_pair

EventSink = Callable[[Any], None]


@dataclass
class Finished:
    """A finished replay of either mode: what it reports and whether a run failed."""

    mode: str
    failed: bool
    notes: list[str]
    _report: Callable[[str], bytes] = field(repr=False)
    runs: tuple[sr.SessionRun, sr.SessionRun] | None = None  # the session mode's per-turn facts of A and B

    def report(self, fmt: str) -> bytes:
        """The document of ``fmt`` (json, md, text), redacted, as the CLI prints it and the app exports it."""
        return self._report(fmt)


@dataclass
class Replay:
    """A replay of ``session`` with ``config``: ``mode`` resume (one cold prefill) or session
    (every turn); ``freeze_system``/``keep_reasoning`` are the session mode's what-ifs."""

    session: str | Path
    config: ReplayConfig
    mode: str = "resume"
    freeze_system: bool = False
    keep_reasoning: bool = False
    server_args: str | None = None  # session mode: the llama-server command line users run (core/server)
    prepared: Prepared | sr.SessionPrepared | None = None

    def prepare(self) -> Prepared | sr.SessionPrepared:
        """The work done once before any run (a bad file fails here, before anything starts)."""
        if self.prepared is None:
            if self.mode == "session":
                prep = sr.prepare_session(self.session, self.config, freeze_system=self.freeze_system,
                                          n_ctx=self.config.ctx_size, keep_reasoning=self.keep_reasoning)
                if self.server_args is not None:
                    from replayer.core.server.session import check_server_args, setup_notes

                    prep.server_args = check_server_args(self.server_args, self.config)
                    prep.turns.notes.extend(setup_notes(prep.server_args, self.config, prep.turns.turns))
                self.prepared = prep
            else:
                self.prepared = prepare(self.session, self.config)
        return self.prepared

    def run(self, on_event: EventSink | None = None, speed: float | None = None,
            controls: Controls | None = None) -> Finished:
        """Both runs, A then B, each event also handed to ``on_event``; ``speed`` paces a
        simulated resume stream (modelled time ÷ speed; None or 0: at once); ``controls``: a
        watcher's pause, speed and cancel (``run_control``)."""
        prep = self.prepare()
        if self.mode == "session":
            return self._session(prep, on_event, controls)
        out: Outcome = replay(prep, on_event=on_event, speed=speed, controls=controls)
        return Finished("resume", out.failed, out.notes,
                        lambda fmt: report(prep, out.comparison, fmt, calibration=out.calibration))

    def stream(self, on_event: EventSink, controls: Controls) -> None:
        """Both runs' events to ``on_event`` as they come, sequenced, paced and cancelled as
        ``run`` does under ``controls``, and nothing kept: what the app renders (its panes, which
        see every event, make the verdict and the report from them, through the same functions)."""
        prep = self.prepare()
        run_pair(lambda run: self.events(prep, run), on_event, realtime=is_realtime(self.config),
                 parallel=self.config.parallel_runs, controls=controls, keep=False)

    def events(self, prep: Prepared | sr.SessionPrepared, run: str) -> Iterator[Any]:
        """One run's event stream in this replay's mode."""
        return sr.session_events(prep, run) if self.mode == "session" else run_events(prep, run)

    def _session(self, prep: sr.SessionPrepared, on_event: EventSink | None, controls: Controls | None) -> Finished:
        if self.config.engine != "live" and on_event is None and controls is None:  # nobody reads the stream
            runs = {run: sr.simulated_session_run(prep, run) for run in ("A", "B")}
        else:
            evs = run_pair(lambda run: self.events(prep, run), on_event, realtime=is_realtime(self.config),
                           parallel=self.config.parallel_runs, controls=controls)
            runs = {run: sr.session_run(prep, run, evs[run]) for run in ("A", "B")}
        pair = (runs["A"], runs["B"])
        doc = sr.report(prep, *pair)
        return Finished("session", any(r.failed for r in pair), [], lambda fmt: sr.session_report(doc, pair, fmt),
                        runs=pair)
