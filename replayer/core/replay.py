"""The one orchestration of a replay: prepare → run A and B on their engines → compare.

The CLI, the app and the exports (and later session replay and bisect) all go through
here, so the same options give the same runs whichever front end asked. The front ends
only turn options into a ``ReplayConfig`` and format what comes back; live servers,
calibration and pacing are decided here, not in them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Sequence, Any, Callable, Iterator

from replayer.core.compare import Comparison, compare
from replayer.core.engine import events as ev
from replayer.core.engine.base import engine_for
from replayer.core.run_control import Controls, run_pair
from replayer.core.prepare import (  # noqa: F401  (re-exported: callers import them from here)
    MODEL_TEMPLATE, RUNS, Prepared, ReplayConfig, demo_session_path, prepare, run_spec)

if TYPE_CHECKING:
    from replayer.core.calibration import Calibration, HeldOut

EventSink = Callable[[ev.Event], None]


def is_realtime(config: ReplayConfig) -> bool:
    """True when the runs' events come in wall-clock time (a real server), not as fast as computed:
    the app runs those in threads, and only they can run at once (``parallel_runs``)."""
    return config.engine != "simulated"


def run_events(prep: Prepared, run: str) -> Iterator[ev.Event]:
    """One run's events, from the engine its spec names."""
    spec = run_spec(run, prep.config)
    return engine_for(spec.engine).events(spec, prep)


def all_simulated(prep: Prepared) -> list[ev.Event]:
    return list(run_events(prep, "A")) + list(run_events(prep, "B"))


def run_both(prep: Prepared, on_event: EventSink | None = None, speed: float | None = None,
             controls: Controls | None = None) -> list[ev.Event]:
    """Both runs' events, A then B (or at once with ``parallel_runs``), each also handed to ``on_event``.

    ``speed`` releases a simulated run's events in modelled time ÷ speed (None or 0: at once);
    ``controls`` (a watching front end's pause, speed and cancel) run them as ``run_control.run_pair``
    says. A failed run is a ``RunFailed`` in its stream; the other run goes on.
    """
    out = run_pair(lambda run: run_events(prep, run), on_event, realtime=is_realtime(prep.config),
                   parallel=prep.config.parallel_runs, speed=speed, controls=controls)
    return [e for run in RUNS for e in out[run]]


@dataclass
class Outcome:
    """A finished replay: its events, the comparison and, when asked for, the fitted calibration."""

    prep: Prepared
    events: list[ev.Event]
    comparison: Comparison
    notes: list[str] = field(default_factory=list)  # for stderr: what was saved where
    calibration: dict[str, Any] | None = None  # the line --calibrate fitted, with its held-out errors

    @property
    def failed(self) -> bool:
        return bool(self.comparison.a.failed or self.comparison.b.failed)


def run_extras(prep: Prepared, cmp: Comparison) -> dict[str, dict[str, Any]]:
    """Per-run facts the reports add: user starts of the layout the run used (the server's, if it
    made one) and the time lost against ideal batching (null for a run that did not finish its prefill)."""
    from replayer.core.advise import batching_loss

    loss = batching_loss(prep, cmp)
    return {s.run: {"user_starts": s.user_starts if s.user_starts is not None
                    else len(prep.layouts[s.run].user_starts),
                    "ideal_batching": loss[s.run].to_dict() if s.run in loss else None} for s in (cmp.a, cmp.b)}


REPORT_FORMATS = ("json", "md", "csv", "text")


def report(prep: Prepared, cmp: Comparison, fmt: str, advice: Sequence[str] | None = None,
           calibration: dict[str, Any] | None = None) -> bytes:
    """A finished replay as the CLI prints it and the app exports it (one document per format).
    The Markdown and terminal reports carry the verdict's advice (``advise.advice_for``;
    computed when the caller has not already); the JSON one the line ``--calibrate`` fitted, if any."""
    from replayer.core import export

    meta = prep.meta()
    if fmt == "json":
        doc = {"session": meta, **({"calibration": calibration} if calibration else {})}
        return export.to_json(cmp, doc, run_extras=run_extras(prep, cmp))
    if fmt == "csv":
        return export.to_csv(cmp).encode()
    if advice is None and fmt in ("md", "markdown", "text"):
        from replayer.core.advise import advice_for

        advice = advice_for(prep, cmp)
    if fmt in ("md", "markdown"):
        return export.to_markdown(cmp, meta, advice=advice or ()).encode()
    if fmt == "text":
        return export.to_text(cmp, meta["notes"], advice=advice or (), incomplete=meta["incomplete"]).encode()
    raise ValueError(f"unknown report format {fmt!r}; known: {', '.join(REPORT_FORMATS)}")


@dataclass
class HeldOutSession:
    """A session ``--calibrate --holdout`` checks the line on: prepared for its live runs and
    for its simulation before anything runs, so a bad file is refused before the long part."""

    path: str
    live: Prepared
    simulated: Prepared

    @classmethod
    def prepare(cls, path: str, config: ReplayConfig) -> "HeldOutSession":
        live_cfg, sim_cfg = config.held_out()
        live = prepare(path, live_cfg)
        return cls(path, live, prepare(path, sim_cfg, session=live.session))

    def run_live(self) -> Comparison:
        """One live run of the session, A then B, as the fitted runs were."""
        return compare(run_both(self.live))

    def check(self, name: str, lives: Sequence[Comparison]) -> tuple[list[HeldOut], list[str]]:
        """The session's live runs (``run_live``, once or ``--repeat`` times) against its
        simulation with the saved line ``name``; one ``HeldOut`` per build whose runs all
        finished, and a line for each that did not."""
        from replayer.core import calibration

        sim_prep = replace(self.simulated, config=replace(self.simulated.config, calibration=name))
        sim = compare(all_simulated(sim_prep))
        checks, failed = [], []
        for side, sm in (("a", sim.a), ("b", sim.b)):
            runs = [getattr(c, side) for c in lives]
            broken = next((r for r in runs if r.failed or r.finished is None), None)
            if broken is not None:
                failed.append(f"  held out {Path(self.path).name} {broken.build or broken.run}: not checked, "
                              f"the live run failed: {broken.failed or 'no prompt time'}")
            else:
                checks.append(calibration.held_out(self.path, runs, sm))
        return checks, failed


def _fitted_batches(cmps: Sequence[Comparison]) -> tuple[list[ev.BatchDone], float | None]:
    """Both builds' batches over the (repeated) live runs that finished, each timed by its
    median, and the largest run-to-run spread of one build's prompt time (None for one run)."""
    from replayer.core import calibration

    timed: list[ev.BatchDone] = []
    spread: float | None = None
    for side in ("a", "b"):
        runs = [s for s in (getattr(c, side) for c in cmps) if not s.failed]
        if runs:
            timed += calibration.median_batches([r.batches for r in runs])
        if len(runs) > 1:
            spread = max(spread or 0.0, calibration.spread([r.prompt_ms for r in runs]))
    return timed, spread


def calibrate(prep: Prepared, cmp: Comparison, held: Sequence[HeldOutSession] = ()) -> tuple[str, Calibration, str]:
    """Fit a cost line on both live runs' batches and save it; then check it on each held-out
    session (never fitted on) and save it again with those errors. Returns the name, the
    calibration and what to say about it.

    With ``--repeat N`` the fitted session (``cmp`` is its first run) and the held-out ones
    are run in turns, N rounds of each: on this kind of machine a whole run drifts 15-35 %
    over minutes (docs/benchmarks.md), and a slow spell then slows both sides alike instead
    of deciding the error; each batch is timed by the median of its rounds."""
    from replayer.core import calibration

    fitted, lives = [cmp], [[] for _ in held]
    for i in range(prep.config.repeat):
        if i:
            fitted.append(compare(run_both(prep)))
        for session, runs in zip(held, lives):
            runs.append(session.run_live())
    timed, run_spread = _fitted_batches(fitted)
    target = prep.config.live_target("A")
    name, cal, dest = calibration.calibrate(timed, prep.config.knobs().n_ubatch_eff, target.backend,
                                            target.model or Path("model"), fitted_on=str(prep.session.path),
                                            threads=target.threads, repeat=len(fitted), run_spread=run_spread)
    failed: list[str] = []
    if held:
        cal.holdout = []
        for session, runs in zip(held, lives):
            checks, not_checked = session.check(name, runs)
            cal.holdout += checks
            failed += not_checked
        dest = calibration.save_calibration(name, cal)
    return name, cal, "\n".join([calibration.describe(name, cal, dest), *failed])


def replay(prep: Prepared, on_event: EventSink | None = None, speed: float | None = None,
           controls: Controls | None = None) -> Outcome:
    """Run both builds and compare them; calibrate when the config asks (live runs only)."""
    calibrating = prep.config.calibrate and is_realtime(prep.config)
    held = [HeldOutSession.prepare(h, prep.config) for h in prep.config.holdout] if calibrating else []
    events = run_both(prep, on_event, speed, controls)
    out = Outcome(prep, events, compare(events))
    if calibrating:
        name, cal, said = calibrate(prep, out.comparison, held)
        out.calibration = {"id": name, **cal.model_dump(mode="json"), "held_out_error": cal.held_out_error()}
        out.notes.append(said)
    return out
