"""Observed vs predicted, one request at a time: what ``replayer watch`` shows per request.

Each traffic-log record (``traffic_log.Exchange.record``, as the proxy writes it) is one row:
what the user's server did (``cache_n``, ``prompt_n``, ``prompt_ms``, tok/s, slot) beside what
the simulated engine predicts for the same request on build B. The prediction is the session
replay's own machinery, fed one turn at a time: the body converted as the server converts its
endpoint (``session.server_conversions``), laid out (by default with the upstream server's own
``/apply-template`` + ``/tokenize``, as the live engine lays turns out, so a difference is the
cache's, not the tokenizer's), then sent to build B's simulated server (``server.slots.ServerSim``:
its slots, slot selection and host cache, as ``replay --mode session --server-args`` runs them) and
timed by the config's cost model. The simulated server is the user's command line
(``watch --server-args``), else build B's defaults with the upstream's number of slots (``/props``
``total_slots``). So each request goes to the slot the simulation picks (an explicit ``id_slot`` in
the body, the most similar idle slot, else the least recently used), which is shown beside the
slot the server chose (``id_slot`` of its answer; b9859's answers do not say, and then the
server's own log does when the watch follows it, ``watch --server-log``): a request whose
``cache_n`` differs from the prediction is flagged, and so is one the server put on another slot.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import SimpleNamespace
from typing import Any, Protocol

from replayer.core.engine.slot_turns import SessionRun, TurnRecord, context_full
from replayer.core.misses import explain
from replayer.core.engine.prefill import timed
from replayer.core.errors import ReplayerError
from replayer.core.prepare import ReplayConfig, run_spec
from replayer.core.prompt import templates
from replayer.core.prompt.turn_layouts import TurnLayouts, TurnPrompt, server_turn_prompt, turn_layouts
from replayer.core.server.help import help_for
from replayer.core.server.session import NO_LIMIT, setup_knobs
from replayer.core.server.setup import ServerSetup, parse_server_args
from replayer.core.server.slots import ServerSim
from replayer.core.server.traffic import MAIN, Request
from replayer.core.session.formats import openai_body
from replayer.core.session.server_conversions import CONVERSIONS, to_chat
from replayer.core.session.turns import Turn


@dataclass
class Side:
    """One side of a row: the server's numbers or the simulation's (None: not known)."""

    cache_n: int | None = None
    prompt_n: int | None = None
    prompt_ms: float | None = None
    full_reprocess: bool = False

    @property
    def n_prompt(self) -> int | None:
        return None if self.cache_n is None or self.prompt_n is None else self.cache_n + self.prompt_n

    @property
    def tok_s(self) -> float | None:
        if self.prompt_n is None or not self.prompt_ms:
            return None
        return self.prompt_n / (self.prompt_ms / 1000.0)


@dataclass
class WatchRow:
    """One request through the proxy: observed beside predicted."""

    index: int  # 0, 1, … in the order the log wrote them
    seq: int  # the proxy's request number
    endpoint: str
    thread: str | None
    slot: int | None
    status: int | None
    observed: Side
    predicted: Side | None = None  # None: not simulated (``note`` says why)
    ms_estimated: bool = False  # observed.prompt_ms is the first byte's time (the answer had no timings)
    error: str | None = None  # the exchange's error (the server's or the proxy's)
    note: str | None = None  # why there is no prediction
    causes: tuple[dict | None, dict | None] = (None, None)  # why each side re-processed (``misses``)
    predicted_slot: int | None = None  # the slot build B's simulated server put the request on
    task: int | None = None  # the server's task of the request, from its log (``watch --server-log``)

    @property
    def differs(self) -> bool:
        """The prediction's reuse is not the server's (the flag)."""
        p, o = self.predicted, self.observed
        return p is not None and o.cache_n is not None and p.cache_n != o.cache_n

    @property
    def slot_differs(self) -> bool:
        """The server put the request on another slot than the simulation (both known)."""
        return self.slot is not None and self.predicted_slot is not None and self.slot != self.predicted_slot

    def records(self) -> tuple[TurnRecord, TurnRecord | None]:
        """The row as the turn strip's records: (observed, predicted)."""
        obs = _record(self.index, self.observed, self.slot, self.error)
        obs.cause = self.causes[0]
        if self.predicted is None:
            return obs, None
        pred = _record(self.index, self.predicted, self.predicted_slot, None)
        pred.cause = self.causes[1]
        return obs, pred

    def to_dict(self) -> dict[str, Any]:
        def side(s: Side | None) -> dict[str, Any] | None:
            if s is None:
                return None
            return {"cache_n": s.cache_n, "prompt_n": s.prompt_n,
                    "prompt_ms": None if s.prompt_ms is None else round(s.prompt_ms, 3),
                    "full_reprocess": s.full_reprocess}
        return {"request": self.index, "seq": self.seq, "endpoint": self.endpoint, "thread": self.thread,
                "slot": self.slot, "predicted_slot": self.predicted_slot, "slot_differs": self.slot_differs,
                "server_task": self.task,
                "status": self.status, "observed": side(self.observed),
                "observed_ms_is_first_byte": self.ms_estimated, "predicted": side(self.predicted),
                "differs": self.differs, "observed_cause": self.causes[0], "predicted_cause": self.causes[1],
                "error": self.error, "note": self.note}


def _record(index: int, s: Side, slot: int | None, error: str | None) -> TurnRecord:
    n = s.n_prompt or 0
    return TurnRecord(index, n_prompt=n, cache_n=s.cache_n or 0, prompt_n=s.prompt_n or 0,
                      prompt_ms=s.prompt_ms or 0.0, full_reprocess=s.full_reprocess, error=error, slot=slot)


def observed_of(index: int, rec: dict[str, Any]) -> WatchRow:
    """A log record's observed side (no prediction yet)."""
    t = rec.get("timings") if isinstance(rec.get("timings"), dict) else {}
    ms = _ms(t.get("prompt_ms"))
    estimated = False
    if ms is None and rec.get("stream") is True and _ms(rec.get("t_first_byte_ms")) is not None:
        ms, estimated = _ms(rec["t_first_byte_ms"]), True  # an upper bound: prefill + first token + the wire
    cache_n, prompt_n, slot = _count(rec.get("cache_n")), _count(rec.get("prompt_n")), _count(rec.get("id_slot"))
    # what the server's own log said of the request (``watch --server-log``, ``log_follow.with_task``)
    logged = rec.get("server_log") if isinstance(rec.get("server_log"), dict) else {}
    return WatchRow(index, _count(rec.get("seq")) or 0, str(rec.get("endpoint")), _text(rec.get("thread")), slot,
                    _count(rec.get("status")), Side(cache_n, prompt_n, ms, logged.get("full_reprocess") is True),
                    ms_estimated=estimated, error=_text(rec.get("error")), task=_count(logged.get("task")))


def _ms(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1e12 else None


def _count(v: Any) -> int | None:
    """An untrusted line's integer field (a bool, a float or a list is not one)."""
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def _text(v: Any) -> str | None:
    return v if isinstance(v, str) else None


class Prompts(Protocol):
    def prompt(self, turn: Turn) -> TurnPrompt: ...
    def n_ctx(self) -> int | None: ...
    def total_slots(self) -> int | None: ...
    def delimiters(self) -> list: ...


class ServerPrompts:
    """Turns laid out by the upstream server itself (its template and tokenizer), read lazily:
    the server may come up after the proxy."""

    def __init__(self, url: str, build) -> None:
        self.url, self.build = url, build
        self.st = None
        self.layouts: TurnLayouts | None = None

    def _ready(self) -> None:
        if self.st is None:
            from replayer.core.prompt.server_tokenizer import ServerTokenizer  # httpx: only when watching

            st = ServerTokenizer(self.url)
            tpl = st.template()
            self.layouts = TurnLayouts([], tpl, templates.delimiters_for(tpl, self.build), st.name, True, tok_obj=st)
            self.st = st

    def prompt(self, turn: Turn) -> TurnPrompt:
        self._ready()
        assert self.layouts is not None
        p, _ = server_turn_prompt(turn, self.st, self.layouts, self.build)
        self.layouts.prompts.clear()  # the slots keep the prompts they need (the previous one each)
        return p

    def n_ctx(self) -> int | None:
        self._ready()
        return self.st.n_ctx()

    def total_slots(self) -> int | None:
        self._ready()
        return self.st.props().total_slots or None

    def delimiters(self) -> list:
        return self.layouts.delimiters if self.layouts is not None else []


class OfflinePrompts:
    """Turns laid out offline with the config's template and tokenizer (``--tokenizer``)."""

    def __init__(self, config: ReplayConfig, build) -> None:
        self.template, self.tokenizer, self.build = config.template_obj(), config.tokenizer_eff, build
        self.delims: list = []

    def prompt(self, turn: Turn) -> TurnPrompt:
        lay = turn_layouts([turn], template=self.template, tokenizer=self.tokenizer, build=self.build)
        self.delims = lay.delimiters
        return lay.prompts[0]

    def n_ctx(self) -> int | None:
        return None

    def total_slots(self) -> int | None:
        return None

    def delimiters(self) -> list:
        return self.delims


@dataclass
class Totals:
    """The running totals the watch shows: requests, re-processed tokens and prompt time."""

    requests: int = 0
    observed_prompt_n: int = 0
    observed_ms: float = 0.0
    observed_timed: int = 0  # requests whose answer carried the server's prompt time
    predicted_prompt_n: int = 0
    predicted_ms: float = 0.0
    compared: int = 0  # rows with both sides' cache_n
    differ: int = 0
    slots_compared: int = 0  # rows with both sides' slot
    slots_differ: int = 0

    def add(self, row: WatchRow) -> None:
        self.requests += 1
        o, p = row.observed, row.predicted
        self.observed_prompt_n += o.prompt_n or 0
        if o.prompt_ms is not None and not row.ms_estimated:
            self.observed_ms += o.prompt_ms
            self.observed_timed += 1
        if p is not None:
            self.predicted_prompt_n += p.prompt_n or 0
            self.predicted_ms += p.prompt_ms or 0.0
            if o.cache_n is not None:
                self.compared += 1
                self.differ += row.differs
        if row.slot is not None and row.predicted_slot is not None:
            self.slots_compared += 1
            self.slots_differ += row.slot_differs


@dataclass
class Predictor:
    """Build B's simulation of each logged request, in the order the log wrote them."""

    config: ReplayConfig
    prompts: Prompts
    server_args: str | None = None  # the user's llama-server command line (None: build B's defaults)
    rows: list[WatchRow] = field(default_factory=list)
    totals: Totals = field(default_factory=Totals)

    def __post_init__(self) -> None:
        self.spec = run_spec("B", self.config)
        self.cost = self.config.cost()
        self.build = self.spec.build
        self.help = help_for(self.build.effective_number)
        self.setup: ServerSetup = parse_server_args(self.server_args or "", self.help)  # a bad flag: refused now
        self.sim: ServerSim | None = None  # made at the first request: the upstream may come up after the proxy
        self.t_ms = 0.0
        self.misses = _Misses()

    @classmethod
    def for_upstream(cls, config: ReplayConfig, upstream_url: str, server_args: str | None = None) -> "Predictor":
        """Laid out by the upstream server unless the config names a tokenizer."""
        build = run_spec("B", config).build
        prompts: Prompts = OfflinePrompts(config, build) if config.tokenizer else ServerPrompts(upstream_url, build)
        return cls(config, prompts, server_args)

    def server(self) -> ServerSim:
        """Build B's simulated server in the user's setup; without ``--server-args``, with as many
        slots as the upstream says it has (``-np N``: a per-slot KV cache, as the server runs it)."""
        if self.sim is None:
            slots = self.prompts.total_slots() if self.server_args is None else None
            if slots and slots != self.setup.n_parallel:
                self.setup = parse_server_args(f"-np {slots}", self.help)
            setup, per_slot = self.setup, self.prompts.n_ctx()
            # the upstream's own context when it says (/props), else no limit: the session replay's
            # rule without a GGUF (server_context), never an assumed 32k the user's server may not have
            total = setup.n_ctx or (per_slot * (1 if setup.kv_unified else setup.n_parallel) if per_slot
                                    else None)
            knobs = setup_knobs(setup, self.spec.knobs, n_ctx=None if total is None else
                                total if setup.kv_unified else total // max(1, setup.n_parallel))
            self.spec = replace(self.spec, knobs=knobs)
            self.sim = ServerSim(setup, self.build, knobs, None, total or NO_LIMIT)
        return self.sim

    def add(self, rec: dict[str, Any]) -> WatchRow:
        row = observed_of(len(self.rows), rec)
        try:
            row.predicted, row.note = self._predict(row, rec)
        except ReplayerError as exc:
            row.note = f"not simulated: {exc}"
        self.rows.append(row)
        self.totals.add(row)
        return row

    def _predict(self, row: WatchRow, rec: dict[str, Any]) -> tuple[Side | None, str | None]:
        if row.endpoint not in CONVERSIONS:
            return None, f"not simulated: {row.endpoint} is not a chat request"
        if row.observed.cache_n is None and row.status != 200:
            return None, "not simulated: the server processed no prompt"
        body = rec.get("body")
        if not isinstance(body, dict):
            return None, "not simulated: the body is not a JSON object"
        try:
            chat = to_chat(row.endpoint, body, self.build.effective_number)
        except (AttributeError, TypeError) as exc:
            return None, f"not simulated: the server's conversion refuses it ({exc})"
        if not openai_body.detect(chat) or not chat["messages"]:  # the importer's own check of a chat body
            return None, "not simulated: no chat messages"
        if row.thread:  # the proxy's thread: each request's misses are read against its own thread's last
            chat = {**chat, "thread": row.thread}
        p = self.prompts.prompt(Turn(row.index, chat))
        sim = self.server()
        held = {s.id: [(c[0], c[1], c[2]) for c in s.slot.checkpoints] for s in sim.slots}  # alive when it came
        facts = sim.request(row.index, Request(p, row.thread or MAIN, _id_slot(body)))
        row.predicted_slot = facts.slot
        sched = facts.schedule
        if sched is None:
            return Side(0, 0, 0.0), context_full(p, sim.n_ctx_slot)
        ms = timed(self.spec, sched, self.cost, self.t_ms).duration
        self.t_ms += ms
        pred = Side(facts.cache_n, facts.prompt_n, ms, facts.full_reprocess)
        if row.observed.n_prompt is not None:  # what the server said, explained on the same prompts
            row.causes = self.misses.explain(row, p, pred, self.prompts.delimiters(), held[facts.slot])
        return pred, None


def _id_slot(body: dict[str, Any]) -> int:
    """The body's ``id_slot`` (-1: the server chooses), as the server reads it."""
    v = body.get("id_slot", -1)
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= -1 else -1


class _Misses:
    """Why each side of a row re-processed what it did: ``misses.explain`` on a run of
    each side's records, the request compared with its thread's previous one on the prompts
    laid out for the prediction. Only each thread's last prompt is kept (a long watch would
    otherwise hold every prompt's text and ids); earlier requests stand in by their thread.
    The server's checkpoints are not known, so its side names the cause without their detail."""

    def __init__(self) -> None:
        self.runs = (SessionRun("observed"), SessionRun("predicted"))
        self.last: dict[str, TurnPrompt] = {}  # thread → its latest prompt
        self.seen: list[SimpleNamespace] = []  # every earlier request: its index and thread

    def explain(self, row: WatchRow, p: TurnPrompt, pred: Side, delims: list,
                held: list[tuple[int, int, int]]) -> tuple[dict | None, dict | None]:
        from replayer.core.session.turns import thread_of

        obs_rec = _record(row.index, row.observed, row.slot, None)
        pred_rec = _record(row.index, pred, row.predicted_slot, None)
        obs_rec.n_prompt = pred_rec.n_prompt = p.n_tokens  # the layout's count: the ideal reuse is measured on it
        pred_rec.held = held
        prompts = [*self.seen, *self.last.values(), p]
        out = []
        for run, rec in zip(self.runs, (obs_rec, pred_rec)):
            run.turns.append(rec)
            explain(run, prompts, delims, start=len(run.turns) - 1)
            out.append(rec.cause)
        if out[0] is not None:
            out[0].pop("checkpoint", None)  # (the server's checkpoints are not in its answer)
        th = thread_of(p.turn)
        prev = self.last.get(th)
        if prev is not None:
            self.seen.append(SimpleNamespace(index=prev.index, turn=SimpleNamespace(thread=th)))
        self.last[th] = p
        return out[0], out[1]
