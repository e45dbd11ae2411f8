"""Live session replay: one real llama-server per build, kept up while every turn is sent in order.

Each turn is a chat request with ``max_tokens: 1`` and ``cache_prompt: true`` (the live
engine's ``live_stream.stream`` sends exactly that) — or, for a turn a traffic log recorded on
``/v1/messages`` or ``/v1/responses``, that request to its own endpoint (``live_wire``: the
build converts it itself): the one sampled token is not kept in the slot, so
the next turn meets exactly the previous prompt in the cache. The turn's prompt is laid out
by the server itself (``/apply-template`` + ``/tokenize``), so the common prefix the client
computes is the server's; what the server then did comes from its own reports — the first
``prompt_progress`` (tokens already there), ``timings.cache_n``/``prompt_n``, the batches of
the progress stream and the ``-lv 4`` log (checkpoints restored, erased, created, and
"forcing full prompt re-processing"). They become the same events as the simulated run.

The server is started by the one driver (``live_server``: the build resolved, ``--timeout`` and
``--threads`` applied, healthy within ``--timeout``, the first turn's prefill counted from the
server's start, as a resume run's). With the user's server command line (``--server-args``) it is
started with those flags (replayer adds only host, port and ``-lv 4``); each
turn waits for its slot's release (the server saves idle slots and picks the next one then)
and the slot the log says it chose goes into the turn's ``TurnFinished``, as the simulated
server's does.

A tiny random model sometimes answers a turn with an error after the prefill (the
tool-call parser refuses the sampled token); the prefill facts of that turn stand.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import httpx

from replayer.core.engine import events as ev
from replayer.core.engine.slot_turns import TurnFinished, TurnStarted, context_full, run_finished
from replayer.core.engine.live_server import LiveOptions, LiveServer, live_options, resolve_server, server_memory
from replayer.core.engine.live_stream import LiveResult, stream
from replayer.core.engine.live_wire import is_wire, send_wire_turn
from replayer.core.engine.logparse import FULL_REPROCESS
from replayer.core.runspec import DEFAULT_SESSION_CTX, DEFAULT_TIMEOUT_S
from replayer.core.server_protocol import Clock, Guard
from replayer.core.errors import ReplayerError, RunError
from replayer.core.prompt import templates
from replayer.core.prompt.layout import PromptLayout
from replayer.core.prompt.server_tokenizer import ServerTokenizer
from replayer.core.prompt.turn_layouts import TurnLayouts, TurnPrompt, server_turn_prompt, shared_prefix



def live_session_events(prep, run: str, model: Path, *, backend: str = "cpu", ctx_size: int = DEFAULT_SESSION_CTX,
                        request_timeout: float = DEFAULT_TIMEOUT_S, binary: Path | None = None,
                        server_args: str | None = None, threads: int | None = None) -> Iterator[Any]:
    """One build's live session run; failures end it with ``RunFailed`` (never raised).

    The server's own per-turn layouts replace ``prep.layouts[run]``, so that misses are
    explained on the prompts the server really saw.
    """
    spec_text = prep.config.a if run == "A" else prep.config.b
    try:
        binary, build = resolve_server(spec_text, backend, binary)
    except ReplayerError as exc:
        yield ev.RunFailed(run=run, error=str(exc))
        return
    cfg = prep.config
    # a preset's knobs, or the flags alone: the memory kind comes from the server's start-up log
    knobs = cfg.knobs()
    settings = {"backend": backend, "n_batch": knobs.n_batch, "n_ubatch": knobs.n_ubatch}
    opts = live_options(binary, model, ctx_size=ctx_size, timeout=request_timeout, threads=threads)
    t0 = time.monotonic()
    try:
        setup = None
        if server_args is not None:  # the user's flags: their batch sizes and checkpoints too
            from replayer.core.server.help import help_for
            from replayer.core.server.session import setup_knobs
            from replayer.core.server.setup import parse_server_args

            setup = parse_server_args(server_args, help_for(build.effective_number))
            knobs = setup_knobs(setup, knobs)
            settings.update(n_batch=knobs.n_batch, n_ubatch=knobs.n_ubatch, server=setup.label())
        yield from _session(run, build, knobs, opts, prep, settings, setup)
    except (ReplayerError, httpx.HTTPError, OSError) as exc:
        msg = str(exc) if isinstance(exc, ReplayerError) else f"{type(exc).__name__}: {exc}"
        yield ev.RunFailed(run=run, error=msg, t_ms=(time.monotonic() - t0) * 1000)


def _session(run, build, knobs, opts: LiveOptions, prep, settings: dict, setup=None) -> Iterator[Any]:
    """Start the server once (one slot, or the user's ``setup``), then send every turn on it in
    order; the run's totals at the end."""
    # the whole session's wall clock: start-up and layout once, then every turn's prefill and token
    clock = Clock(opts.health_timeout + opts.layout_timeout
                  + len(prep.turns.turns) * (opts.request_timeout + opts.generation_timeout))
    guard = Guard(clock)
    try:
        yield from _on_server(run, build, knobs, opts, prep, settings, setup, clock, guard)
    except (ReplayerError, httpx.HTTPError, OSError):
        if guard.fired or clock.expired():  # a request cut at a phase's end: say which deadline
            raise clock.error() from None
        raise
    finally:
        guard.close()  # a cancelled run (closed generator) leaves no request thread reading


def _on_server(run, build, knobs, opts: LiveOptions, prep, settings: dict, setup, clock: Clock,
               guard: Guard) -> Iterator[Any]:
    turns = prep.turns.turns
    server = LiveServer(opts, knobs, opts.ctx_size or DEFAULT_SESSION_CTX, setup=setup)
    with server, guard.client(opts.request_timeout) as client:
        server.wait_healthy(client, clock)
        server.layout_phase(clock)
        st = ServerTokenizer(server.url, client)
        tpl = st.template()
        n_ctx = st.n_ctx() or server.n_ctx
        knobs = server_memory(knobs, list(server.all_lines))
        layouts = TurnLayouts([], tpl, templates.delimiters_for(tpl, build), "server", True)
        prep.layouts[run] = layouts
        yield ev.RunStarted(run=run, label=f"{run}: {build.label}", build=build.label,
                            generation=build.generation.value, engine="live", n_tokens=0,
                            settings={**settings, "binary": str(opts.binary), "model": str(opts.model),
                                      "ctx_size": n_ctx, "memory": knobs.memory, "n_swa": knobs.n_swa, "mode": "session",
                                      "turns": len(turns)})
        totals = _Totals()
        log = _LogTail(run, server.all_lines)
        yield from log.since_last(None, 0.0)  # the start-up: slots, KV cache, prompt cache, checkpoints
        prev: TurnPrompt | None = None
        for turn in turns:
            server.layout_phase(clock, first=totals.sent == 0)  # inside --timeout, as the prefill after it
            p, lay = server_turn_prompt(turn, st, layouts, build)
            common = shared_prefix(prev, p).n_tokens if prev is not None else 0
            yield TurnStarted(run, turn.index, p.n_tokens, turn.n_messages, common, totals.t)
            if p.n_tokens >= n_ctx:
                yield TurnFinished(run, turn.index, p.n_tokens, 0, 0, 0.0, False, totals.t, error=context_full(p, n_ctx))
                continue
            if is_wire(turn):  # recorded on /v1/messages or /v1/responses: sent there, as recorded
                _wire_phase(clock, server, opts, totals)
                yield from send_wire_turn(run, p, lay, server, client, knobs, opts, totals, setup is not None)
            else:
                yield from _send_turn(run, p, lay, server, client, knobs, clock, guard, opts, totals,
                                      setup is not None)
            yield from log.since_last(turn.index, totals.t)
            prev = p
        if not server.alive():
            raise RunError(f"llama-server died during the session: {server.last_error()}")
        yield run_finished(run, prev.n_tokens if prev else 0, totals.processed, totals.t, totals.n_batches,
                           totals.n_ckpt)


def _wire_phase(clock: Clock, server: LiveServer, opts: LiveOptions, totals: "_Totals") -> None:
    """A recorded turn is one request, not streamed: its prefill and its one token share a phase,
    the first counted from the server's start as a chat turn's prefill is."""
    prefill_s = server.left_of(opts.request_timeout) if totals.sent == 0 else opts.request_timeout
    totals.sent += 1
    clock.phase("prefill", prefill_s + opts.generation_timeout,
                late=f"the recorded request did not finish within {opts.request_timeout + opts.generation_timeout:g} s")


class _LogTail:
    """The server's relevant log lines since the last call, as ``LogLine`` events: each turn's
    lines go out after its ``TurnFinished``, tagged with it (what the server logs after the
    response, e.g. the slot's release, comes with the next turn's)."""

    def __init__(self, run: str, lines: list[str]) -> None:
        self.run, self.lines, self.seen = run, lines, 0

    def since_last(self, turn: int | None, t_ms: float) -> Iterator[ev.LogLine]:
        from replayer.core.server.logfacts import relevant_lines

        end = len(self.lines)  # the reader thread appends; what is there now
        new, self.seen = self.lines[self.seen:end], end
        for text in relevant_lines(new):
            yield ev.LogLine(run=self.run, text=text, t_ms=t_ms, turn=turn)


@dataclass
class _Totals:
    """The session so far: its clock (the sum of the turns' prefill times) and its counts."""

    t: float = 0.0
    n_batches: int = 0
    n_ckpt: int = 0
    processed: int = 0
    sent: int = 0  # requests sent so far


def _send_turn(run: str, p: TurnPrompt, lay: PromptLayout, server: LiveServer, client: httpx.Client, knobs,
               clock: Clock, guard: Guard, opts: LiveOptions, totals: _Totals,
               observe_slot: bool = False) -> Iterator[Any]:
    """One turn's request on the running server: its batches and checkpoints on the session's
    clock, then what the server reused and re-processed (its own timings, else the first
    progress) and, with ``observe_slot``, the slot its log says it chose. The first request's
    prefill gets what is left of ``--timeout`` after the server's start; every later one all of it.
    It returns once the server's log says the slot is released, so that the turn's log lines are
    all read."""
    server.drain()  # what the previous turn logged after its prefill
    first_line = len(server.all_lines)
    result = LiveResult(layout=lay)
    turn_ms = 0.0
    body = {k: v for k, v in p.turn.body.items() if k != "thread"}  # a request log's own field
    prefill_s = server.left_of(opts.request_timeout) if totals.sent == 0 else opts.request_timeout
    totals.sent += 1
    for e in stream(run, server.url, client, body, knobs, lay, server.lines, server.alive,
                    server.last_error, server.all_lines, result, clock, guard,
                    (prefill_s, opts.generation_timeout), prefill_limit=opts.request_timeout):
        if isinstance(e, ev.RunFinished):
            turn_ms = e.prompt_ms
            continue
        e.t_ms += totals.t
        if isinstance(e, ev.BatchDone):
            e.t_start_ms += totals.t
            totals.n_batches += 1
        elif isinstance(e, ev.CheckpointCreated):
            totals.n_ckpt += 1
        yield e
    tm = result.timings
    cache_n = int(tm["cache_n"]) if "cache_n" in tm else (result.progress[0] if result.progress else 0)
    prompt_n = int(tm["prompt_n"]) if "prompt_n" in tm else p.n_tokens - cache_n
    from replayer.core.server.live_slots import wait_idle

    wait_idle(server, first_line)  # the slot released: the turn's whole log is read (its slot, its LogLines)
    slot = None
    if observe_slot:
        from replayer.core.server.logfacts import read_request

        slot = read_request(server.all_lines[first_line:]).slot
    full = any(FULL_REPROCESS in line for line in server.all_lines[first_line:])
    totals.processed += prompt_n
    totals.t += turn_ms
    yield TurnFinished(run, p.index, p.n_tokens, cache_n, prompt_n, turn_ms, full, totals.t, slot=slot)
