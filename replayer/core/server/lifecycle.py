"""The server's life between requests: sleeping when idle, and a router unloading a model.

Two things drop every cached state of a model at once, whatever the slots and the host cache
would have kept (lines per build in docs/cache-rules.md):

- **Sleep** (``--sleep-idle-seconds S``, default -1 = never): the task loop
  (``server_queue::start_loop``, ``server-queue.cpp``) enters the sleeping state once no task
  came for ``S`` seconds since the last one ended (checked at least once a second), and
  ``handle_sleeping_state`` (``server-context.cpp``) frees the model and its context. The
  next request wakes it: ``load_model`` runs again, which clears and re-creates the slots
  (their KV and checkpoints gone) and makes a new, empty host prompt cache. So the request
  after a long enough pause starts cold on every thread.
- **A router's unload** (``--models-max N``, default 4; 0 = no limit): a request for a model
  that is not running makes the router load it, and when ``N`` models are running already it
  first stops the least recently used one (``server_models::unload_lru`` / the LRU scheduler's
  ``pick_victim`` in ``server-models.cpp``; ``last_used`` is set at load and at each proxied
  request). The stopped child's slots and host cache go with its process; a sleeping child
  still counts as running and can be the one stopped.

Here a server instance is a ``ServerSim`` per model; a sleep or an unload replaces it with a
fresh one and says so in the request's facts (``RequestFacts.lost_state``). Idle time is read
from the requests' own times (``Request.sent`` / ``done``): the time from the model's previous
request's end to this one's arrival, or from its previous arrival where the file records no
end (an upper bound: the previous answer's own time is counted as idle). Requests without
times never sleep, and the notes say so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

from replayer.core.server.setup import ServerSetup
from replayer.core.server.slots import RequestFacts, ServerSim
from replayer.core.server.traffic import Request

__all__ = ["ServerLife", "idle_before", "is_router", "life_notes", "SLEPT", "UNLOADED"]

SLEPT = "slept"
UNLOADED = "unloaded"
#: router-only flags: a command line with one of them runs the router (one instance per model)
_ROUTER_FLAGS = ("--models-preset", "--models-dir")


def is_router(setup: ServerSetup) -> bool:
    """The setup runs a router: a models preset or folder, or ``--models-max`` given."""
    return any(a in _ROUTER_FLAGS for a in setup.args) or "models_max" in setup.given


def idle_before(prev: Request | None, req: Request) -> float | None:
    """Seconds the model's server had no task before ``req`` (None: the times are not recorded)."""
    if prev is None or req.sent is None:
        return None
    end = prev.done if prev.done is not None else prev.sent
    return None if end is None else max(0.0, req.sent - end)


@dataclass
class _Instance:
    sim: ServerSim
    last: Request | None = None  # its previous request: when it last had a task
    last_used: int = -1  # the router's ``last_used``, as a request counter


class ServerLife:
    """The instances of one server (a model) or a router (one per model) over a stream.

    ``make``: a fresh ``ServerSim`` — what a process start or a wake gives (empty slots, an
    empty host cache)."""

    def __init__(self, setup: ServerSetup, make: Callable[[], ServerSim]) -> None:
        self.setup = setup
        self.make = make
        self.router = is_router(setup)
        self.models_max = (setup.models_max or 0) if self.router else 0
        self.sleep_s = setup.sleep_idle_seconds if setup.sleep_idle_seconds is not None else -1
        self.running: dict[str, _Instance] = {}
        self.seen: set[str] = set()
        self.order: list[str] = []  # the model of each request so far

    def _key(self, req: Request) -> str:
        return req.model if self.router else ""

    def _start(self, key: str, index: int) -> tuple[_Instance, str]:
        """A model not running: the LRU one stopped first when ``--models-max`` are running."""
        lost = UNLOADED if key in self.seen else ""
        if self.models_max > 0 and len(self.running) >= self.models_max:
            victim = min(self.running, key=lambda k: self.running[k].last_used)
            del self.running[victim]
        inst = self.running[key] = _Instance(self.make())
        self.seen.add(key)
        return inst, lost

    def request(self, index: int, req: Request) -> RequestFacts:
        key = self._key(req)
        inst = self.running.get(key)
        lost, idle = "", None
        if inst is None:
            inst, lost = self._start(key, index)
        else:
            idle = idle_before(inst.last, req)
            if self.sleep_s >= 0 and idle is not None and idle >= self.sleep_s:
                inst.sim = self.make()  # woken: load_model again, slots and host cache new
                lost = SLEPT
        inst.last, inst.last_used = req, index
        f = inst.sim.request(index, req)
        f.lost_state, f.idle_s = lost, idle
        if lost == SLEPT:
            f.lost_cause = f"the server slept: idle {idle:.1f} s ≥ --sleep-idle-seconds {self.sleep_s}"
            f.lost_fix = f"--sleep-idle-seconds {int(idle or 0) + 1}"
        elif lost == UNLOADED:
            need = self._distance(key, index)
            f.lost_cause = f"the router unloaded the model (--models-max {self.models_max})"
            f.lost_fix = f"--models-max {need}"
        self.order.append(key)
        return f

    def _distance(self, key: str, index: int) -> int:
        """The models a router must hold to have kept ``key`` since its previous request: it and
        every other model asked for since (the LRU stack distance)."""
        others: set[str] = set()
        for k in reversed(self.order):
            if k == key:
                break
            others.add(k)
        return len(others) + 1

    def run(self, requests: list[Request]) -> Iterator[RequestFacts]:
        for i, r in enumerate(requests):
            yield self.request(i, r)


def life_notes(setup: ServerSetup, turns: list) -> list[str]:
    """What the report says about sleep and unloads: the flags in effect, and a stream whose
    times are not recorded (nothing can sleep) or only as send times (idle is an upper bound)."""
    from replayer.core.server.traffic import model_of

    out = []
    times = [getattr(t, "times", None) or (None, None) for t in turns]
    sleep = setup.sleep_idle_seconds if setup.sleep_idle_seconds is not None else -1
    if sleep >= 0:
        if all(sent is None for sent, _ in times):
            out.append(f"--sleep-idle-seconds {sleep}: the requests carry no times (this format records none), "
                       "so no sleep is simulated")
        elif any(sent is not None and done is None for sent, done in times):
            out.append(f"--sleep-idle-seconds {sleep}: the file records when each request was sent, not when "
                       "its answer ended; idle time is counted from the previous request's send time")
    if is_router(setup) and turns:
        models = list(dict.fromkeys(model_of(t) for t in turns))
        limit = f"--models-max {setup.models_max}, LRU unload" if setup.models_max else "no --models-max limit"
        out.append(f"router: {len(models)} model(s) named by the requests "
                   f"({', '.join(m or '(none)' for m in models)}), {limit}")
    return out
