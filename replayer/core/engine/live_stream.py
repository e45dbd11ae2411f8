"""One request against a live server, as events: its progress stream and its log, read together.

The request goes out with ``return_progress`` and ``max_tokens: 1`` on a thread; its
``prompt_progress`` chunks (one a decoded batch) become ``BatchDone`` and ``Progress``, the
``-lv 4`` log lines (``logparse``) become the checkpoint events, and both decide when the prefill
is complete, which turns a later failure into ``prefill complete, generation failed: …`` (the
prefill facts stand) instead of a failed run. Every resume run and every turn of a live session
replay is read here, from a server ``live_server`` started or one already running (attach).
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Generator, Iterator

import httpx

from replayer.core.engine import events as ev
from replayer.core.engine.logparse import LogFact, parse_line
from replayer.core.engine.schedule import Knobs, ReasonRule
from replayer.core.errors import RunError
from replayer.core.prompt.layout import PromptLayout
from replayer.core.server_protocol import Chunk, Clock, Guard, http_error, sse_chunks


@dataclass
class LiveResult:
    layout: PromptLayout | None = None
    log_batch_starts: list[int] = field(default_factory=list)
    progress: list[int] = field(default_factory=list)
    timings: dict[str, Any] = field(default_factory=dict)
    log_lines: list[str] = field(default_factory=list)
    status: str = ""  # the run's final status (``complete``, ``prefill complete, …``, ``failed: …``)


def post(client: httpx.Client, url: str, req: dict, out: "queue.Queue[tuple[str, Any]]") -> None:
    """The streaming request (a thread): every outcome, any exception included, ends in ``out``."""
    try:
        with client.stream("POST", url + "/v1/chat/completions", json=req) as resp:
            if resp.status_code != 200:
                out.put(("error", RunError(http_error("/v1/chat/completions", resp.status_code, resp.read()))))
                return
            for chunk in sse_chunks(resp.iter_lines()):
                out.put(("chunk", chunk))
        out.put(("done", None))
    except Exception as exc:  # noqa: BLE001 - reported to the run, never lost with the thread
        out.put(("error", exc))


def stream(run: str, url: str, client: httpx.Client, body: dict, knobs: Knobs, layout: PromptLayout,
           lines: "queue.Queue[tuple[float, str]]", alive: Callable[[], bool], last_error: Callable[[], str],
           all_lines: list[str], result: LiveResult, clock: Clock, guard: Guard,
           budgets: tuple[float, float], has_log: bool = True,
           prefill_limit: float | None = None) -> Iterator[ev.Event]:
    """Send the request and turn progress chunks + log lines into events (both run modes).

    The prefill is complete when the progress reaches the prompt's total, when the stream
    reports its ``timings`` or when the log reports the prompt eval time. A failure after
    that ends the run as ``prefill complete, generation failed: …`` with its prefill facts; a
    failure before it raises (``RunFailed``). ``budgets``: the seconds the prefill and then the one
    generated token may take; ``prefill_limit``: the ``--timeout`` a late prefill names, when its
    budget is what is left of it after the server's start (the first request).
    """
    server = ServerSide(lines, alive, last_error, all_lines, has_log)
    yield from Prefill(run, knobs, layout, result, clock, guard, server).events(client, url, body, budgets,
                                                                                prefill_limit)


@dataclass
class ServerSide:
    """What a run knows of its server besides the HTTP stream: its log lines (queued as they
    come, and all of them), whether it still runs, its last error line, whether a log exists."""

    lines: "queue.Queue[tuple[float, str]]"
    alive: Callable[[], bool]
    last_error: Callable[[], str]
    all_lines: list[str]
    has_log: bool


class Prefill:
    """One request's prefill as it streams: the progress chunks become batches, the log lines
    checkpoints, and both decide when the prefill is complete (which turns a later failure into
    ``generation failed`` instead of a failed run)."""

    def __init__(self, run: str, knobs: Knobs, layout: PromptLayout, result: LiveResult, clock: Clock,
                 guard: Guard, server: ServerSide) -> None:
        self.run, self.knobs, self.result, self.clock, self.guard, self.server = run, knobs, result, clock, guard, server
        self.n_tokens = layout.n_tokens
        self.reason_of = ReasonRule(layout.n_tokens, layout.user_starts, knobs)
        self.generation_s = 0.0
        self.t_req = 0.0
        self.prev_p: int | None = None
        self.prev_t = 0.0
        self.batch_index = 0
        self.n_created = 0
        self.prefill_done = False
        self.prompt_eval: tuple[float, int] | None = None  # (ms, tokens) from the log

    def events(self, client: httpx.Client, url: str, body: dict, budgets: tuple[float, float],
               prefill_limit: float | None = None) -> Iterator[ev.Event]:
        req = dict(body, max_tokens=1, stream=True, return_progress=True, cache_prompt=True, temperature=0)
        out: "queue.Queue[tuple[str, Any]]" = queue.Queue()
        prefill_s, self.generation_s = budgets
        self.clock.phase("prefill", prefill_s,
                         late=f"the prefill did not finish within {prefill_limit or prefill_s:g} s")
        self.t_req = time.monotonic()
        threading.Thread(target=post, args=(client, url, req, out), daemon=True).start()
        failure = yield from self._pump(out)
        if failure and not self.prefill_done:
            raise RunError(self._died_or(failure))
        yield from self._trailing_log()
        self.result.log_lines = list(self.server.all_lines)
        yield self._finished(failure)

    def _pump(self, out: "queue.Queue[tuple[str, Any]]") -> Generator[ev.Event, None, str | None]:
        """Log lines and stream chunks until the stream ends; returns the failure, if any."""
        while True:
            # log lines first: a checkpoint is logged before its batch's progress event
            while True:
                try:
                    ts, line = self.server.lines.get_nowait()
                except queue.Empty:
                    break
                yield from self._log_events(ts, line)
            if self.prompt_eval is not None:
                self._finish_prefill()
            if self.clock.expired():
                self.guard.cut()
                return str(self.clock.error())
            try:
                kind, payload = out.get(timeout=0.05)
            except queue.Empty:
                if not self.server.alive():
                    return f"llama-server died during the replay: {self.server.last_error()}"
                continue
            if kind == "done":
                return None if self.prefill_done else "the stream ended before the prefill finished"
            if kind == "error":
                return str(self.guard.explain(payload))
            yield from self._chunk_events(payload)
            if payload.error_message is not None:
                return f"llama-server reported an error: {payload.error_message}"

    def _log_events(self, line_ts: float, line: str) -> Iterator[ev.Event]:
        fact = parse_line(line)
        if fact is None:
            return
        if fact.kind == "prompt_eval":
            self.prompt_eval = (float(fact.values[0]), int(fact.values[1]))
        for e in fact_events(self.run, fact, (line_ts - self.t_req) * 1000, self.result):
            if isinstance(e, ev.CheckpointCreated):
                self.n_created += 1
            yield e

    def _chunk_events(self, chunk: Chunk) -> Iterator[ev.Event]:
        """A batch for each step of the progress; the chunk's timings, if any, end the prefill."""
        pp = chunk.prompt_progress
        if pp is not None:
            p, t_ms = pp.processed, pp.time_ms
            self.result.progress.append(p)
            if self.prev_p is None:
                self.prev_p, self.prev_t = p, t_ms
            elif p > self.prev_p:
                start = self.prev_p
                n_ub = -(-(p - start) // self.knobs.n_ubatch_eff)
                yield ev.BatchDone(run=self.run, index=self.batch_index, start=start, n_tokens=p - start,
                                   n_ubatches=n_ub, reason=self.reason_of(start, p), t_start_ms=self.prev_t, t_ms=t_ms)
                yield ev.Progress(run=self.run, processed=p, total=self.n_tokens, t_ms=t_ms)
                self.batch_index += 1
                self.prev_p, self.prev_t = p, t_ms
            if pp.total and p >= pp.total:
                self._finish_prefill()
        if chunk.timings is not None:
            self.result.timings = chunk.timings.model_dump(exclude_none=True)
            if chunk.timings.prompt_n is not None:
                self._finish_prefill()

    def _finish_prefill(self) -> None:
        """From here on only the one generated token is awaited, on its own budget."""
        if not self.prefill_done:
            self.prefill_done = True
            self.clock.phase("generation", self.generation_s,
                             late=f"the prefill finished but the stream did not end within {self.generation_s:g} s")

    def _died_or(self, failure: str) -> str:
        """A killed server's connection can drop before the process is reaped: wait a moment, so
        that the failure names the death and its log line rather than a reset connection."""
        deadline = time.monotonic() + 1.0
        while self.server.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not self.server.alive():
            return f"llama-server died during the replay: {self.server.last_error()}"
        return failure

    def _trailing_log(self) -> Iterator[ev.Event]:
        """The final log lines (prompt eval time) trail the stream a little."""
        deadline = time.monotonic() + (1.0 if self.server.has_log else 0.0)
        while self.prompt_eval is None and time.monotonic() < deadline:
            try:
                ts, line = self.server.lines.get(timeout=0.05)
            except queue.Empty:
                continue
            yield from self._log_events(ts, line)

    def _finished(self, failure: str | None) -> ev.RunFinished:
        """The run's totals: the server's own timings first, then the log's prompt eval, then the stream."""
        tm, pe = self.result.timings, self.prompt_eval
        prompt_ms = float(tm.get("prompt_ms") or (pe[0] if pe else 0) or self.prev_t)
        processed = int(tm.get("prompt_n") or (pe[1] if pe else 0) or self.n_tokens)
        tps = float(tm.get("prompt_per_second") or (processed / (prompt_ms / 1000) if prompt_ms else 0))
        status = ev.STATUS_COMPLETE if failure is None else ev.GENERATION_FAILED + failure
        return ev.RunFinished(run=self.run, n_tokens=self.n_tokens, n_processed=processed, prompt_ms=prompt_ms,
                              tokens_per_s=tps, n_batches=self.batch_index, n_checkpoints=self.n_created,
                              t_ms=prompt_ms, status=status)


def fact_events(run: str, fact: LogFact, t_ms: float, result: LiveResult) -> Iterator[ev.Event]:
    v = fact.values
    if fact.kind == "batch_start":
        result.log_batch_starts.append(v[0])
    elif fact.kind == "created":
        yield ev.CheckpointCreated(run=run, n_tokens=v[4], pos_min=v[2], pos_max=v[3], size_mib=v[5], count=v[0],
                                   n_max=v[1], t_ms=t_ms)
    elif fact.kind == "erased":
        yield ev.CheckpointErased(run=run, n_tokens=v[3], pos_min=v[1], pos_max=v[2], reason=v[0], t_ms=t_ms)
    elif fact.kind == "restored":
        yield ev.CheckpointRestored(run=run, n_tokens=v[2], pos_min=v[0], pos_max=v[1], n_past=v[3], t_ms=t_ms)
