"""One request stream on a real server and on the simulation, request by request: do they agree?

The live tests and ``benchmarks/slots_matrix.py`` ask the same question of each setup: the
server runs the stream with the user's flags, the simulation runs on the prompts the server
laid out, with the memory kind the server reported and the state sizes of the GGUF; each
request's slot, selection, ``cache_n``, ``prompt_n``, host-cache events and checkpoints are
compared, and the saved states' sizes against the server's own figures.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from replayer.core.builds.catalog import parse_build
from replayer.core.engine.live_server import server_memory
from replayer.core.engine.schedule import Knobs
from replayer.core.hardware import gguf_model
from replayer.core.server.help import help_for
from replayer.core.server.lifecycle import ServerLife
from replayer.core.server.live_slots import LiveRun, live_key, run_live, sim_key
from replayer.core.server.setup import ServerSetup, from_preset, parse_server_args
from replayer.core.server.slots import RequestFacts, ServerSim
from replayer.core.server.state_size import from_gguf
from replayer.core.session.turns import Turn

__all__ = ["Agreement", "agree", "simulate_for"]


@dataclass
class Agreement:
    build: int
    args: str
    setup: ServerSetup
    live: LiveRun
    sim: list[RequestFacts]
    differ: list[int] = field(default_factory=list)  # requests whose facts differ
    size_errors: list[tuple[int, int, float, float]] = field(default_factory=list)  # (request, tokens, live, sim MiB)

    @property
    def n_equal(self) -> int:
        return len(self.sim) - len(self.differ)


def simulate_for(setup: ServerSetup, build: int, model: Path, live: LiveRun) -> list[RequestFacts]:
    """The simulation of ``live``'s requests on the prompts its server laid out."""
    knobs = server_memory(Knobs(n_batch=setup.n_batch, n_ubatch=setup.n_ubatch,
                                n_ctx_checkpoints=setup.n_ctx_checkpoints,
                                checkpoint_min_step=setup.checkpoint_min_step), live.lines)
    n_ctx_slot = live.n_ctx if setup.kv_unified else live.n_ctx // max(1, setup.n_parallel)
    knobs = dataclasses.replace(knobs, n_ctx=n_ctx_slot)
    sizes = from_gguf(gguf_model.read(model))
    life = ServerLife(setup, lambda: ServerSim(setup, parse_build(build), knobs, sizes, live.n_ctx))
    return list(life.run(live.requests))


def agree(binary: Path, model: Path, build: int, args: str, bodies: list[dict],
          preset: tuple[Path, str] | None = None, pauses: list[float] | None = None) -> Agreement:
    """``preset``: (INI, model section) — a router with that preset; ``args`` is then the router's
    command line. ``pauses``: real seconds to wait before each request (``run_live``)."""
    h = help_for(build, binary=binary)
    setup = parse_server_args(args, h) if preset is None else from_preset(preset[0], h, model=preset[1],
                                                                          command_line=args)
    turns = [Turn(i, b) for i, b in enumerate(bodies)]
    live = run_live(binary, model, setup, turns, parse_build(build), router=preset, pauses=pauses)
    sim = simulate_for(setup, build, model, live)
    out = Agreement(build, args, setup, live, sim)
    sizes = from_gguf(gguf_model.read(model))
    for i, f in enumerate(sim):
        if sim_key(f) != live_key(live, i):
            out.differ.append(i)
        for kind, n, mib in live.facts[i].cache:
            if kind == "saved" and abs(sizes.of(n) / 2**20 - mib) > 0.0006:  # the log rounds to 0.001 MiB
                out.size_errors.append((i, n, mib, sizes.of(n) / 2**20))
    return out
