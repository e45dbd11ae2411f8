"""Live replay: a real llama-server, driven over HTTP, read from its progress stream and log.

One run = start the binary on 127.0.0.1 (a session of its own), wait for ``/health``, lay out
the prompt with the server's own ``/apply-template`` + ``/tokenize``, send the resume request
with ``return_progress``, and turn both the ``prompt_progress`` stream (one event per decoded
batch) and the ``-lv 4`` log (batch starts, checkpoints) into the same events as the simulator.

Nothing the server says is believed unchecked (``protocol``), every phase has a wall-clock end
(start, health, layout, prefill, generation, and the run as a whole), and the run ends with an
explicit status: ``RunFinished`` (``complete``, or ``prefill complete, generation failed: …``
when the server failed after processing the whole prompt: its prefill facts stand) or
``RunFailed``. The server is always stopped afterwards, with everything it forked
(``processes``), whatever happened, Ctrl-C and SIGTERM included.
"""

from __future__ import annotations

import dataclasses
import os
import queue
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Generator, Iterator

import httpx
import orjson

from replayer.core.builds.catalog import Build
from replayer.core.builds.manager import probe_version
from replayer.core.engine import events as ev
from replayer.core.engine import processes
from replayer.core.engine.logparse import LogFact, memory_kind, parse_line
from replayer.core.engine.processes import live_processes, stop_all, stop_started_by  # noqa: F401  (the live engine's API)
from replayer.core.runspec import DEFAULT_TIMEOUT_S
from replayer.core.server_protocol import Chunk, Clock, Guard, Health, http_error, one_line, parse, sse_chunks
from replayer.core.engine.schedule import Knobs, ReasonRule
from replayer.core.errors import BuildError, ReplayerError, RunError
from replayer.core.prompt import templates
from replayer.core.prompt.layout import PromptLayout, layout_of_text
from replayer.core.prompt.server_tokenizer import ServerTokenizer


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


@dataclass
class LiveOptions:
    """One server's start-up and the wall-clock budget of each phase of its run (seconds)."""

    binary: Path
    model: Path
    ctx_size: int | None = None  # None: fits the prompt (never truncates it)
    port: int | None = None  # None: a free port
    extra_args: list[str] = field(default_factory=list)
    health_timeout: float = 120.0  # start → /health says ok (the model loaded)
    request_timeout: float = DEFAULT_TIMEOUT_S  # the prefill: request sent → every prompt token processed
    log_file: Path | None = None  # also keep the server log here
    start_timeout: float = 30.0  # start → the server answers HTTP at all (llama-server binds before loading)
    layout_timeout: float = 120.0  # /props, /apply-template, /tokenize
    generation_timeout: float = 60.0  # prefill complete → end of the stream (one token)
    run_timeout: float | None = None  # the whole run; None: the sum of the phases

    def run_seconds(self) -> float:
        return self.run_timeout or (self.health_timeout + self.layout_timeout + self.request_timeout
                                    + self.generation_timeout)


@dataclass
class LiveResult:
    layout: PromptLayout | None = None
    log_batch_starts: list[int] = field(default_factory=list)
    progress: list[int] = field(default_factory=list)
    timings: dict[str, Any] = field(default_factory=dict)
    log_lines: list[str] = field(default_factory=list)
    status: str = ""  # the run's final status (``complete``, ``prefill complete, …``, ``failed: …``)


class LiveServer:
    """A running llama-server; a context manager that always stops it."""

    #: where the log is read from: stderr; a router relays its children's log on stdout (server.live_slots)
    streams: dict[str, int] = {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE}

    def __init__(self, opts: LiveOptions, knobs: Knobs, n_ctx: int) -> None:
        self.opts = opts
        self.knobs = knobs
        self.n_ctx = n_ctx
        self.port = opts.port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.lines: "queue.Queue[tuple[float, str]]" = queue.Queue()
        self.all_lines: list[str] = []
        self._reader: threading.Thread | None = None
        self.started_at = 0.0

    def command(self) -> list[str]:
        k = self.knobs
        cmd = [str(self.opts.binary), "-m", str(self.opts.model), "--host", "127.0.0.1", "--port", str(self.port),
               "-c", str(self.n_ctx), "-b", str(k.n_batch), "-ub", str(k.n_ubatch), "--jinja", "-np", "1",
               "-lv", "4", "--cache-ram", "0", "--ctx-checkpoints", str(k.n_ctx_checkpoints)]
        if k.checkpoint_min_step is not None:
            cmd += ["--checkpoint-min-step", str(k.checkpoint_min_step)]
        return cmd + list(self.opts.extra_args)

    def __enter__(self) -> "LiveServer":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self) -> None:
        if not self.opts.binary.exists():
            raise BuildError(f"no such binary: {self.opts.binary}")
        probe_version(self.opts.binary)  # refuses anything that is not llama-server
        if not self.opts.model.is_file():
            raise RunError(f"no such model file: {self.opts.model}")
        if self.opts.port and port_in_use(self.opts.port):
            raise RunError(f"port {self.opts.port} on 127.0.0.1 is already in use")
        env = dict(os.environ)
        env.pop("LLAMA_ARG_HOST", None)  # never let the environment move the bind address
        self.started_at = time.monotonic()
        self.proc = processes.spawn(self.command(), stdin=subprocess.DEVNULL, **self.streams, text=True,
                                    errors="replace", bufsize=1, env=env)
        processes.register(self.proc)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        log = self.proc.stderr or self.proc.stdout if self.proc is not None else None
        assert log is not None
        logf = self.opts.log_file.open("a") if self.opts.log_file else None
        try:
            for line in log:
                self.lines.put((time.monotonic(), line))
                self.all_lines.append(line)
                if logf:
                    logf.write(line)
        finally:
            if logf:
                logf.close()

    def stop(self) -> None:
        if self.proc is not None:
            processes.stop(self.proc)
        if self._reader is not None:
            self._reader.join(timeout=5)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def last_error(self) -> str:
        for line in reversed(self.all_lines[-60:]):
            text = line.strip()
            low = text.lower()
            if any(k in low for k in ("error", "failed", "couldn't", "could not", "invalid", "unable")):
                return text[:240]
        return (self.all_lines[-1].strip()[:240] if self.all_lines else "no output")

    def wait_healthy(self, client: httpx.Client, clock: Clock | None = None) -> None:
        """Poll ``/health`` until it says ok: first the start phase (the server answers HTTP at
        all), then the health phase (the model loads); both count from the start of the process."""
        assert self.proc is not None
        clock = clock or Clock(self.opts.health_timeout)
        since = time.monotonic() - self.started_at
        clock.phase("start", max(0.0, min(self.opts.start_timeout, self.opts.health_timeout) - since),
                    late=f"llama-server did not become healthy within {min(self.opts.start_timeout, self.opts.health_timeout):g} s "
                         f"(it never answered HTTP on 127.0.0.1:{self.port})")
        answered = False
        while not clock.expired():
            rc = self.proc.poll()
            if rc is not None:
                time.sleep(0.1)  # let the reader catch the last lines
                detail = self.last_error()
                if "bind" in detail.lower() or "address already in use" in detail.lower():
                    raise RunError(f"port {self.port} on 127.0.0.1 is already in use ({detail})")
                raise RunError(f"llama-server exited with code {rc} before it was ready: {detail}")
            try:
                r = client.get(self.url + "/health", timeout=min(2.0, max(0.1, clock.remaining())))
            except httpx.HTTPError:
                time.sleep(0.05)
                continue
            if not answered:
                answered = True
                since = time.monotonic() - self.started_at
                clock.phase("health", max(0.0, self.opts.health_timeout - since),
                            late=f"llama-server did not become healthy within {self.opts.health_timeout:g} s "
                                 "(it answered, but its model did not finish loading)")
            if r.status_code == 200 and parse(Health, r.content, "/health reply").status == "ok":
                return
            time.sleep(0.05)
        raise clock.error()


def _run_events(run: str, result: LiveResult, body: Callable[[], Iterator[ev.Event]],
                guard: Guard | None = None) -> Iterator[ev.Event]:
    """A run's events; every failure, a deadline included, becomes ``RunFailed`` (never raised)."""
    t0 = time.monotonic()
    try:
        for e in body():
            if isinstance(e, ev.RunFinished):
                result.status = e.status
            yield e
    except (ReplayerError, httpx.HTTPError, OSError) as exc:
        err = guard.explain(exc) if guard is not None else exc
        msg = str(err) if isinstance(err, ReplayerError) else f"{type(err).__name__}: {err}"
        failed = ev.RunFailed(run=run, error=one_line(msg, 400), t_ms=(time.monotonic() - t0) * 1000)
        result.status = failed.status
        yield failed
    finally:
        if guard is not None:  # a cancelled run (closed generator) leaves no request thread reading
            guard.close()


def live_events(run: str, build: Build, knobs: Knobs, opts: LiveOptions, body: dict, label: str = "",
                result: LiveResult | None = None, template_hint: templates.Template | None = None,
                settings: dict | None = None) -> Iterator[ev.Event]:
    """One live run as events; failures become ``RunFailed`` (the generator never raises them)."""
    result = result if result is not None else LiveResult()
    clock = Clock(opts.run_seconds())
    guard = Guard(clock)
    yield from _run_events(run, result, lambda: _live(run, build, knobs, opts, body, label, result, template_hint,
                                                      settings or {}, clock, guard), guard)


def installed_run_events(run: str, spec: str, backend: str, knobs: Knobs, model: Path, body: dict, *,
                         ctx_size: int | None = None, request_timeout: float = DEFAULT_TIMEOUT_S,
                         result: LiveResult | None = None, settings: dict | None = None,
                         run_timeout: float | None = None, threads: int | None = None) -> Iterator[ev.Event]:
    """A live run of a build given as the user wrote it (number or binary path).

    The build number comes from the binary itself; a build that cannot be resolved is a
    ``RunFailed`` like any other failure of the run. ``threads`` sets the server's -t and -tb.
    """
    from replayer.core.builds.manager import resolve_binary

    try:
        rb = resolve_binary(spec, backend)
        build = rb.as_build(live=True)
    except ReplayerError as exc:
        failed = ev.RunFailed(run=run, error=str(exc))
        if result is not None:
            result.status = failed.status
        yield failed
        return
    opts = LiveOptions(binary=rb.binary, model=model, ctx_size=ctx_size, request_timeout=request_timeout,
                       run_timeout=run_timeout,
                       extra_args=["-t", str(threads), "-tb", str(threads)] if threads else [])
    yield from live_events(run, build, knobs, opts, body, label=f"{run}: {build.label}", result=result,
                           settings=settings)


def _ctx_for(n_tokens_estimate: int) -> int:
    """A context that holds the prompt with room to spare, in steps of 4096."""
    need = int(n_tokens_estimate * 1.3) + 1024
    return max(4096, -(-need // 4096) * 4096)


def _live(run: str, build: Build, knobs: Knobs, opts: LiveOptions, body: dict, label: str, result: LiveResult,
          template_hint: templates.Template | None, settings: dict, clock: Clock, guard: Guard) -> Iterator[ev.Event]:
    chars = len(orjson.dumps(body))
    n_ctx = opts.ctx_size or _ctx_for(chars // 2)  # ≥ 1 token per 2 bytes of JSON: never truncates
    server = LiveServer(opts, knobs, n_ctx)
    with server, guard.client(opts.request_timeout) as client:
        server.wait_healthy(client, clock)
        clock.phase("layout", opts.layout_timeout)
        st = ServerTokenizer(server.url, client)
        tpl = template_hint or st.template()
        text = st.apply_template(body["messages"], body.get("tools"))
        layout = layout_of_text(text, templates.delimiters_for(tpl, build), st, tpl.name, build)
        result.layout = layout
        N = layout.n_tokens
        n_ctx = st.n_ctx() or n_ctx  # the server caps -c at the model's training context
        if N >= n_ctx:
            raise RunError(f"the prompt has {N} tokens but the server's context is {n_ctx}; raise --ctx-size "
                           "(or use a model with a longer context)")
        knobs = _server_memory(knobs, list(server.all_lines))
        yield ev.RunStarted(run=run, label=label or build.label, build=build.label, generation=build.generation.value,
                            engine="live", n_tokens=N, settings={**settings, "binary": str(opts.binary),
                                                                  "model": str(opts.model), "port": server.port,
                                                                  "ctx_size": n_ctx, "memory": knobs.memory})
        while not server.lines.empty():  # start-up lines are not part of the run
            server.lines.get_nowait()
        yield from _stream(run, server.url, client, body, knobs, layout, server.lines, server.alive,
                           server.last_error, server.all_lines, result, clock, guard,
                           (opts.request_timeout, opts.generation_timeout))


def _server_memory(knobs: Knobs, lines: list[str]) -> Knobs:
    """The knobs with the memory kind the server reports (labels need it: only a model that
    checkpoints has near-end cuts), not the one a preset or a default guessed."""
    kind, n_swa = memory_kind(lines)
    if kind is None or (kind == knobs.memory and (n_swa is None or n_swa == knobs.n_swa)):
        return knobs
    return dataclasses.replace(knobs, memory=kind, n_swa=n_swa or knobs.n_swa)


def _post(client: httpx.Client, url: str, req: dict, out: "queue.Queue[tuple[str, Any]]") -> None:
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


def _stream(run: str, url: str, client: httpx.Client, body: dict, knobs: Knobs, layout: PromptLayout,
            lines: "queue.Queue[tuple[float, str]]", alive: Callable[[], bool], last_error: Callable[[], str],
            all_lines: list[str], result: LiveResult, clock: Clock, guard: Guard,
            budgets: tuple[float, float], has_log: bool = True) -> Iterator[ev.Event]:
    """Send the request and turn progress chunks + log lines into events (both run modes).

    The prefill is complete when the progress reaches the prompt's total, when the stream
    reports its ``timings`` or when the log reports the prompt eval time. A failure after
    that ends the run as ``prefill complete, generation failed: …`` with its prefill facts; a
    failure before it raises (``RunFailed``).
    """
    server = _ServerSide(lines, alive, last_error, all_lines, has_log)
    yield from _Prefill(run, knobs, layout, result, clock, guard, server).events(client, url, body, budgets)


@dataclass
class _ServerSide:
    """What a run knows of its server besides the HTTP stream: its log lines (queued as they
    come, and all of them), whether it still runs, its last error line, whether a log exists."""

    lines: "queue.Queue[tuple[float, str]]"
    alive: Callable[[], bool]
    last_error: Callable[[], str]
    all_lines: list[str]
    has_log: bool


class _Prefill:
    """One request's prefill as it streams: the progress chunks become batches, the log lines
    checkpoints, and both decide when the prefill is complete (which turns a later failure into
    ``generation failed`` instead of a failed run)."""

    def __init__(self, run: str, knobs: Knobs, layout: PromptLayout, result: LiveResult, clock: Clock,
                 guard: Guard, server: _ServerSide) -> None:
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

    def events(self, client: httpx.Client, url: str, body: dict, budgets: tuple[float, float]) -> Iterator[ev.Event]:
        req = dict(body, max_tokens=1, stream=True, return_progress=True, cache_prompt=True, temperature=0)
        out: "queue.Queue[tuple[str, Any]]" = queue.Queue()
        prefill_s, self.generation_s = budgets
        self.clock.phase("prefill", prefill_s, late=f"the prefill did not finish within {prefill_s:g} s")
        self.t_req = time.monotonic()
        threading.Thread(target=_post, args=(client, url, req, out), daemon=True).start()
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


def _tail(path: Path, lines: "queue.Queue[tuple[float, str]]", all_lines: list[str], stop: threading.Event) -> None:
    """Follow a server's ``--log-file`` from its current end (read-only)."""
    try:
        with open(path, "r", errors="replace") as fh:
            fh.seek(0, os.SEEK_END)
            while not stop.is_set():
                line = fh.readline()
                if not line:
                    time.sleep(0.02)
                    continue
                lines.put((time.monotonic(), line))
                all_lines.append(line)
    except OSError:
        return


def attach_events(run: str, build: Build, knobs: Knobs, url: str, body: dict, *, log_file: Path | None = None,
                  label: str = "", result: LiveResult | None = None, settings: dict | None = None,
                  timeout: float = DEFAULT_TIMEOUT_S, health_timeout: float = 10.0, layout_timeout: float = 120.0,
                  generation_timeout: float = 60.0, run_timeout: float | None = None) -> Iterator[ev.Event]:
    """A run against a server that is already running: progress stream, plus its log if given.

    ``timeout`` is the prefill's wall-clock budget; the run as a whole ends after
    ``run_timeout`` (default: the sum of its phases) whatever the server does.
    Batch reasons need the server's own ``-b``/``-ub``: pass the same values in ``knobs``.
    """
    result = result if result is not None else LiveResult()
    clock = Clock(run_timeout or health_timeout + layout_timeout + timeout + generation_timeout)
    guard = Guard(clock)
    yield from _run_events(run, result, lambda: _attached(run, build, knobs, url.rstrip("/"), body, log_file, label,
                                                          result, settings or {}, clock, guard,
                                                          (health_timeout, layout_timeout, timeout,
                                                           generation_timeout)), guard)


def _attached(run: str, build: Build, knobs: Knobs, url: str, body: dict, log_file: Path | None, label: str,
              result: LiveResult, settings: dict, clock: Clock, guard: Guard,
              budgets: tuple[float, float, float, float]) -> Iterator[ev.Event]:
    health_s, layout_s, prefill_s, generation_s = budgets
    lines: "queue.Queue[tuple[float, str]]" = queue.Queue()
    all_lines: list[str] = []
    stop = threading.Event()
    if log_file is not None and not Path(log_file).is_file():
        raise RunError(f"no such log file: {log_file}")
    try:
        if log_file is not None:
            threading.Thread(target=_tail, args=(Path(log_file), lines, all_lines, stop), daemon=True).start()
        with guard.client(prefill_s) as client:
            clock.phase("health", health_s, late=f"no healthy llama-server answered at {url} within {health_s:g} s")
            try:
                r = client.get(url + "/health")
            except httpx.HTTPError as exc:
                if guard.fired:
                    raise clock.error() from None
                raise RunError(f"no healthy llama-server answers at {url}") from exc
            if r.status_code != 200:
                raise RunError(f"no healthy llama-server answers at {url} "
                               f"({http_error('/health', r.status_code, r.content)})")
            if parse(Health, r.content, "/health reply").status != "ok":
                raise RunError(f"no healthy llama-server answers at {url}")
            clock.phase("layout", layout_s)
            st = ServerTokenizer(url, client)
            tpl = st.template()
            text = st.apply_template(body["messages"], body.get("tools"))
            layout = layout_of_text(text, templates.delimiters_for(tpl, build), st, tpl.name, build)
            result.layout = layout
            yield ev.RunStarted(run=run, label=label or build.label, build=build.label,
                                generation=build.generation.value, engine="live", n_tokens=layout.n_tokens,
                                settings={**settings, "server": url, "log_file": str(log_file or "")})
            time.sleep(0.05 if log_file else 0)
            while not lines.empty():
                lines.get_nowait()
            yield from _stream(run, url, client, body, knobs, layout, lines, lambda: True,
                               lambda: "the connection was lost", all_lines, result, clock, guard,
                               (prefill_s, generation_s), has_log=log_file is not None)
    finally:
        stop.set()
