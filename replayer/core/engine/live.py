"""Live replay: a real llama-server, driven over HTTP, read from its progress stream and log.

One run = start the binary on 127.0.0.1 (its own process group), wait for ``/health``,
lay out the prompt with the server's own ``/apply-template`` + ``/tokenize``, send the
resume request with ``return_progress``, and turn both the ``prompt_progress`` stream
(one event per decoded batch) and the ``-lv 4`` log (batch starts, checkpoints) into the
same events as the simulator. The server is always stopped afterwards — SIGINT, then the
whole process group is killed after a grace period — whatever happened, Ctrl-C included.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import queue
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import httpx
import orjson

from replayer.core.builds.catalog import Build
from replayer.core.builds.manager import probe_version
from replayer.core.engine import events as ev
from replayer.core.engine.logparse import LogFact, memory_kind, parse_line
from replayer.core.engine.schedule import Knobs, ReasonRule
from replayer.core.errors import BuildError, ReplayerError, RunError
from replayer.core.prompt import templates
from replayer.core.prompt.layout import PromptLayout, layout_of_text
from replayer.core.prompt.server_tokenizer import ServerTokenizer

_LIVE: set[subprocess.Popen] = set()
_LIVE_LOCK = threading.Lock()
_OWNER: dict[subprocess.Popen, int] = {}  # server → the thread that started it (a run's worker)


def live_processes() -> list[subprocess.Popen]:
    with _LIVE_LOCK:
        return [p for p in _LIVE if p.poll() is None]


def stop_all() -> None:
    """Stop every server this process started (used on Ctrl-C and at exit)."""
    for p in live_processes():
        _stop(p, grace=3.0)


def stop_started_by(thread_id: int, grace: float = 0.5) -> int:
    """Stop the servers one run's thread started (cancelling that run, not the other one);
    the run's own generator then ends with a ``RunFailed``. Returns how many were stopped."""
    with _LIVE_LOCK:
        mine = [p for p in _LIVE if _OWNER.get(p) == thread_id and p.poll() is None]
    for p in mine:
        _stop(p, grace=grace)
    return len(mine)


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


def _stop(proc: subprocess.Popen, grace: float = 10.0) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    with _LIVE_LOCK:
        _LIVE.discard(proc)
        _OWNER.pop(proc, None)


@dataclass
class LiveOptions:
    binary: Path
    model: Path
    ctx_size: int | None = None  # None: fits the prompt (never truncates it)
    port: int | None = None  # None: a free port
    extra_args: list[str] = field(default_factory=list)
    health_timeout: float = 120.0
    request_timeout: float = 600.0
    log_file: Path | None = None  # also keep the server log here


@dataclass
class LiveResult:
    layout: PromptLayout | None = None
    log_batch_starts: list[int] = field(default_factory=list)
    progress: list[int] = field(default_factory=list)
    timings: dict[str, Any] = field(default_factory=dict)
    log_lines: list[str] = field(default_factory=list)


class LiveServer:
    """A running llama-server; a context manager that always stops it."""

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
        self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, errors="replace", bufsize=1,
                                     start_new_session=True, env=env)
        with _LIVE_LOCK:
            _LIVE.add(self.proc)
            _OWNER[self.proc] = threading.get_ident()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        logf = self.opts.log_file.open("a") if self.opts.log_file else None
        try:
            for line in self.proc.stderr:
                self.lines.put((time.monotonic(), line))
                self.all_lines.append(line)
                if logf:
                    logf.write(line)
        finally:
            if logf:
                logf.close()

    def stop(self) -> None:
        if self.proc is not None:
            _stop(self.proc)
        if self._reader is not None:
            self._reader.join(timeout=5)

    def last_error(self) -> str:
        for line in reversed(self.all_lines[-60:]):
            text = line.strip()
            low = text.lower()
            if any(k in low for k in ("error", "failed", "couldn't", "could not", "invalid", "unable")):
                return text[:240]
        return (self.all_lines[-1].strip()[:240] if self.all_lines else "no output")

    def wait_healthy(self, client: httpx.Client) -> None:
        deadline = time.monotonic() + self.opts.health_timeout
        assert self.proc is not None
        while time.monotonic() < deadline:
            rc = self.proc.poll()
            if rc is not None:
                time.sleep(0.1)  # let the reader catch the last lines
                detail = self.last_error()
                if "bind" in detail.lower() or "address already in use" in detail.lower():
                    raise RunError(f"port {self.port} on 127.0.0.1 is already in use ({detail})")
                raise RunError(f"llama-server exited with code {rc} before it was ready: {detail}")
            try:
                r = client.get(self.url + "/health", timeout=2)
                if r.status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RunError(f"llama-server did not become healthy within {self.opts.health_timeout:.0f} s")


def _sse(resp: httpx.Response) -> Iterator[dict]:
    for line in resp.iter_lines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            return
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            yield obj


def live_events(run: str, build: Build, knobs: Knobs, opts: LiveOptions, body: dict, label: str = "",
                result: LiveResult | None = None, template_hint: templates.Template | None = None,
                settings: dict | None = None) -> Iterator[ev.Event]:
    """One live run as events; failures become ``RunFailed`` (the generator never raises them)."""
    result = result if result is not None else LiveResult()
    t0 = time.monotonic()
    try:
        yield from _live(run, build, knobs, opts, body, label, result, template_hint, settings or {}, t0)
    except (ReplayerError, httpx.HTTPError, OSError) as exc:
        msg = str(exc) if isinstance(exc, ReplayerError) else f"{type(exc).__name__}: {exc}"
        yield ev.RunFailed(run=run, error=msg, t_ms=(time.monotonic() - t0) * 1000)


def installed_run_events(run: str, spec: str, backend: str, knobs: Knobs, model: Path, body: dict, *,
                         ctx_size: int | None = None, request_timeout: float = 600.0,
                         result: LiveResult | None = None, settings: dict | None = None) -> Iterator[ev.Event]:
    """A live run of a build given as the user wrote it (number or binary path).

    The build number comes from the binary itself; a build that cannot be resolved is a
    ``RunFailed`` like any other failure of the run.
    """
    from replayer.core.builds.catalog import parse_build
    from replayer.core.builds.manager import resolve_binary

    try:
        rb = resolve_binary(spec, backend)
        build = parse_build(str(rb.build))
    except ReplayerError as exc:
        yield ev.RunFailed(run=run, error=str(exc))
        return
    opts = LiveOptions(binary=rb.binary, model=model, ctx_size=ctx_size, request_timeout=request_timeout)
    yield from live_events(run, build, knobs, opts, body, label=f"{run}: {build.label}", result=result,
                           settings=settings)


def _ctx_for(n_tokens_estimate: int) -> int:
    """A context that holds the prompt with room to spare, in steps of 4096."""
    need = int(n_tokens_estimate * 1.3) + 1024
    return max(4096, -(-need // 4096) * 4096)


def _live(run: str, build: Build, knobs: Knobs, opts: LiveOptions, body: dict, label: str, result: LiveResult,
          template_hint: templates.Template | None, settings: dict, t0: float) -> Iterator[ev.Event]:
    chars = len(orjson.dumps(body))
    n_ctx = opts.ctx_size or _ctx_for(chars // 2)  # ≥ 1 token per 2 bytes of JSON: never truncates
    server = LiveServer(opts, knobs, n_ctx)
    with server, httpx.Client(timeout=httpx.Timeout(opts.request_timeout, connect=5.0)) as client:
        server.wait_healthy(client)
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
        yield from _stream(run, server.url, client, body, knobs, layout, server.lines,
                           lambda: server.proc is not None and server.proc.poll() is None, server.last_error,
                           server.all_lines, result)


def _server_memory(knobs: Knobs, lines: list[str]) -> Knobs:
    """The knobs with the memory kind the server reports (labels need it: only a model that
    checkpoints has near-end cuts), not the one a preset or a default guessed."""
    kind, n_swa = memory_kind(lines)
    if kind is None or (kind == knobs.memory and (n_swa is None or n_swa == knobs.n_swa)):
        return knobs
    return dataclasses.replace(knobs, memory=kind, n_swa=n_swa or knobs.n_swa)


def _stream(run: str, url: str, client: httpx.Client, body: dict, knobs: Knobs, layout: PromptLayout,
            lines: "queue.Queue[tuple[float, str]]", alive, last_error, all_lines: list[str],
            result: LiveResult) -> Iterator[ev.Event]:
    """Send the request and turn progress chunks + log lines into events (both run modes)."""
    N = layout.n_tokens
    reason_of = ReasonRule(N, layout.user_starts, knobs)
    req = dict(body, max_tokens=1, stream=True, return_progress=True, cache_prompt=True, temperature=0)
    out: "queue.Queue[tuple[str, Any]]" = queue.Queue()

    def post() -> None:
        try:
            with client.stream("POST", url + "/v1/chat/completions", json=req) as resp:
                if resp.status_code != 200:
                    resp.read()
                    try:
                        err = resp.json().get("error", {})
                        msg = err.get("message") if isinstance(err, dict) else str(err)
                    except ValueError:
                        msg = resp.text[:200]
                    out.put(("error", f"llama-server answered HTTP {resp.status_code}: {msg}"))
                    return
                for obj in _sse(resp):
                    out.put(("chunk", obj))
            out.put(("done", None))
        except httpx.HTTPError as exc:
            out.put(("error", f"the request failed: {type(exc).__name__}: {exc}"))

    t_req = time.monotonic()
    sender = threading.Thread(target=post, daemon=True)
    sender.start()
    prev_p, prev_t = None, 0.0
    batch_index = 0
    n_created = 0
    done = False
    failure: str | None = None
    while not done:
        # log lines first: a checkpoint is logged before its batch's progress event
        while True:
            try:
                ts, line = lines.get_nowait()
            except queue.Empty:
                break
            fact = parse_line(line)
            t_ms = (ts - t_req) * 1000
            if fact is not None:
                for e in _fact_events(run, fact, t_ms, result):
                    if isinstance(e, ev.CheckpointCreated):
                        n_created += 1
                    yield e
        try:
            kind, payload = out.get(timeout=0.05)
        except queue.Empty:
            if not alive():
                failure = f"llama-server died during the replay: {last_error()}"
                break
            continue
        if kind == "error":
            failure = payload
            break
        if kind == "done":
            done = True
            break
        pp = payload.get("prompt_progress")
        if isinstance(pp, dict):
            p, t_ms = int(pp["processed"]), float(pp.get("time_ms", 0))
            result.progress.append(p)
            if prev_p is None:
                prev_p, prev_t = p, t_ms
            elif p > prev_p:
                reason = reason_of(prev_p, p)
                n_ub = -(-(p - prev_p) // knobs.n_ubatch_eff)
                yield ev.BatchDone(run=run, index=batch_index, start=prev_p, n_tokens=p - prev_p, n_ubatches=n_ub,
                                   reason=reason, t_start_ms=prev_t, t_ms=t_ms)
                yield ev.Progress(run=run, processed=p, total=N, t_ms=t_ms)
                batch_index += 1
                prev_p, prev_t = p, t_ms
        if isinstance(payload.get("timings"), dict):
            result.timings = payload["timings"]
    if failure:
        # a killed server's connection can drop before the process is reaped: wait a moment
        deadline = time.monotonic() + 1.0
        while alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not alive():
            failure = f"llama-server died during the replay: {last_error()}"
        raise RunError(failure)
    # the final log lines (prompt eval time) trail the stream a little
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        try:
            ts, line = lines.get(timeout=0.05)
        except queue.Empty:
            continue
        fact = parse_line(line)
        if fact is not None:
            yield from _fact_events(run, fact, (ts - t_req) * 1000, result)
            if fact.kind == "prompt_eval":
                break
    result.log_lines = list(all_lines)
    tm = result.timings
    prompt_ms = float(tm.get("prompt_ms") or prev_t)
    processed = int(tm.get("prompt_n") or N)
    tps = float(tm.get("prompt_per_second") or (processed / (prompt_ms / 1000) if prompt_ms else 0))
    yield ev.RunFinished(run=run, n_tokens=N, n_processed=processed, prompt_ms=prompt_ms, tokens_per_s=tps,
                         n_batches=batch_index, n_checkpoints=n_created, t_ms=prompt_ms)



def _fact_events(run: str, fact: LogFact, t_ms: float, result: LiveResult) -> Iterator[ev.Event]:
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
                  timeout: float = 600.0) -> Iterator[ev.Event]:
    """A run against a server that is already running: progress stream, plus its log if given.

    Batch reasons need the server's own ``-b``/``-ub``: pass the same values in ``knobs``.
    """
    result = result if result is not None else LiveResult()
    t0 = time.monotonic()
    url = url.rstrip("/")
    lines: "queue.Queue[tuple[float, str]]" = queue.Queue()
    all_lines: list[str] = []
    stop = threading.Event()
    if log_file is not None:
        if not Path(log_file).is_file():
            yield ev.RunFailed(run=run, error=f"no such log file: {log_file}")
            return
        threading.Thread(target=_tail, args=(Path(log_file), lines, all_lines, stop), daemon=True).start()
    try:
        with httpx.Client(timeout=httpx.Timeout(timeout, connect=5.0)) as client:
            try:
                ok = client.get(url + "/health").status_code == 200
            except httpx.HTTPError:
                ok = False
            if not ok:
                raise RunError(f"no healthy llama-server answers at {url}")
            st = ServerTokenizer(url, client)
            tpl = st.template()
            text = st.apply_template(body["messages"], body.get("tools"))
            layout = layout_of_text(text, templates.delimiters_for(tpl, build), st, tpl.name, build)
            result.layout = layout
            yield ev.RunStarted(run=run, label=label or build.label, build=build.label,
                                generation=build.generation.value, engine="live", n_tokens=layout.n_tokens,
                                settings={**(settings or {}), "server": url, "log_file": str(log_file or "")})
            time.sleep(0.05 if log_file else 0)
            while not lines.empty():
                lines.get_nowait()
            yield from _stream(run, url, client, body, knobs, layout, lines, lambda: True,
                               lambda: "the connection was lost", all_lines, result)
    except (ReplayerError, httpx.HTTPError, OSError) as exc:
        msg = str(exc) if isinstance(exc, ReplayerError) else f"{type(exc).__name__}: {exc}"
        yield ev.RunFailed(run=run, error=msg, t_ms=(time.monotonic() - t0) * 1000)
    finally:
        stop.set()
