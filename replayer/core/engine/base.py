"""The one engine interface: ``events(spec, prepared) -> Iterator[Event]``.

An engine turns one run's spec and the prepared replay (session, request, layouts, cost
model) into the event stream; everything a run produces — its layout when the server
makes it, batches, checkpoints, timings, a failure — travels as events, so the orchestrator,
the panes and the exports never ask an engine anything else. Engines are looked up by
name and imported on first use (a simulated replay never loads the HTTP client).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Iterator, Protocol

from replayer.core.engine.events import Event
from replayer.core.errors import ReplayerError
from replayer.core.runspec import RunSpec

if TYPE_CHECKING:  # the prepared replay is built above the engines; they only read it
    from replayer.core.prepare import Prepared


class Engine(Protocol):
    name: str

    def events(self, spec: RunSpec, prepared: "Prepared") -> Iterator[Event]: ...


#: name → "module:class"; a new engine is one module and one line here
ENGINES: dict[str, str] = {
    "simulated": "replayer.core.engine.simulate:SimulatedEngine",
    "live": "replayer.core.engine.live_engines:LiveEngine",
    "attach": "replayer.core.engine.live_engines:AttachEngine",
}


def engine_for(name: str) -> Engine:
    if name not in ENGINES:
        raise ReplayerError(f"unknown engine {name!r}; known: {', '.join(ENGINES)}")
    module, cls = ENGINES[name].split(":")
    return getattr(import_module(module), cls)()
