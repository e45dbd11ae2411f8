"""The one live-server driver: which binary, with which flags, started, healthy, its log, stopped.

Every path that runs a real llama-server goes through here — the resume replay
(``live.live_events``), the live session replay (``live_session``), bisect's measurements
(``bisect.LiveMeasure``, through ``live.installed_run_events``) and the user's-setup checks
(``server.live_slots``) — so that the build is resolved one way (``resolve_server``), the
options one way (``live_options``: ``--timeout`` and ``--threads``), the command line one way
(``LiveServer.command``: replayer's one slot, or the user's own flags plus what replayer needs
to observe the server) and the start-up has one deadline.

The deadline of the start-up is inside ``--timeout``: the server must answer HTTP within
``start_timeout`` and be healthy within ``health_timeout``, both counted from the start of the
process and neither longer than ``request_timeout`` (``--timeout``); the first request's prefill
then gets what is left of ``--timeout`` (``LiveServer.left_of``), and so does the prompt's layout
between them (``LiveServer.layout_phase``). A server that never becomes
healthy with ``--timeout 20`` fails after 20 s with one line, not after the two minutes a big
model may need to load.

The server runs on 127.0.0.1 in a session of its own, its log read on a thread (every line kept,
and queued with its arrival time for the run reading it), and is stopped with everything it
forked (``processes``) whatever happens.
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
from typing import TYPE_CHECKING, Any

import httpx

from replayer.core.builds.catalog import Build, parse_build
from replayer.core.builds.manager import probe_version
from replayer.core import processes
from replayer.core.engine.logparse import memory_kind
from replayer.core.errors import BuildError, RunError
from replayer.core.runspec import DEFAULT_TIMEOUT_S, Knobs
from replayer.core.server_protocol import Clock, Health, parse

if TYPE_CHECKING:
    from replayer.core.server.setup import ServerSetup


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
    health_timeout: float = 120.0  # start → /health says ok (the model loaded); never more than request_timeout
    request_timeout: float = DEFAULT_TIMEOUT_S  # --timeout: start → the first prefill done; each later prefill
    log_file: Path | None = None  # also keep the server log here
    start_timeout: float = 30.0  # start → the server answers HTTP at all (llama-server binds before loading)
    layout_timeout: float = 120.0  # /props, /apply-template, /tokenize
    generation_timeout: float = 60.0  # prefill complete → end of the stream (one token)
    run_timeout: float | None = None  # the whole run; None: the sum of the phases

    def run_seconds(self) -> float:
        return self.run_timeout or (self.health_timeout + self.layout_timeout + self.request_timeout
                                    + self.generation_timeout)

    def ready_seconds(self) -> tuple[float, float]:
        """(answers HTTP, healthy): the start-up's two deadlines, both inside ``--timeout``."""
        healthy = min(self.health_timeout, self.request_timeout)
        return min(self.start_timeout, healthy), healthy


def live_options(binary: Path, model: Path, *, ctx_size: int | None = None, timeout: float = DEFAULT_TIMEOUT_S,
                 threads: int | None = None, run_timeout: float | None = None) -> LiveOptions:
    """The options of a server started for a replay, from the user's ``--ctx-size``,
    ``--timeout`` and ``--threads`` (the servers' ``-t``/``-tb``; None: llama-server's own)."""
    return LiveOptions(binary=Path(binary), model=Path(model), ctx_size=ctx_size, request_timeout=timeout,
                       run_timeout=run_timeout,
                       extra_args=["-t", str(threads), "-tb", str(threads)] if threads else [])


def resolve_server(build_spec: str, backend: str, binary: Path | None = None) -> tuple[Path, Build]:
    """The binary and the build of a run, read one way by every live path: the build as the
    user wrote it (a number, or a binary path) among the installed ones, numbered by the binary
    itself; or a ``binary`` given outright (a source build), numbered by ``build_spec``.
    Raises ``ReplayerError`` (the caller's run fails with it)."""
    if binary is not None:
        return Path(binary), parse_build(build_spec)
    from replayer.core.builds.manager import resolve_binary

    rb = resolve_binary(build_spec, backend)
    return Path(rb.binary), rb.as_build(live=True)


def server_memory(knobs: Knobs, lines: list[str]) -> Knobs:
    """The knobs with the memory kind the server reports (labels need it: only a model that
    checkpoints has near-end cuts), not the one a preset or a default guessed."""
    kind, n_swa = memory_kind(lines)
    if kind is None or (kind == knobs.memory and (n_swa is None or n_swa == knobs.n_swa)):
        return knobs
    return dataclasses.replace(knobs, memory=kind, n_swa=n_swa or knobs.n_swa)


class LiveServer:
    """A running llama-server; a context manager that always stops it.

    ``setup`` (the user's parsed ``--server-args``): started with the user's flags instead of
    replayer's one slot; replayer adds only host, port and ``-lv 4``."""

    #: where the log is read from: stderr; a router relays its children's log on stdout (server.live_slots)
    streams: dict[str, int] = {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE}

    def __init__(self, opts: LiveOptions, knobs: Knobs, n_ctx: int, setup: "ServerSetup | None" = None) -> None:
        self.opts = opts
        self.knobs = knobs
        self.setup = setup
        self.n_ctx = (setup.n_ctx or 0) if setup is not None else n_ctx
        self.port = opts.port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.lines: "queue.Queue[tuple[float, str]]" = queue.Queue()
        self.all_lines: list[str] = []
        self._reader: threading.Thread | None = None
        self.started_at = 0.0

    def command(self) -> list[str]:
        if self.setup is not None:
            return self._setup_command(self.setup)
        k = self.knobs
        cmd = [str(self.opts.binary), "-m", str(self.opts.model), "--host", "127.0.0.1", "--port", str(self.port),
               "-c", str(self.n_ctx), "-b", str(k.n_batch), "-ub", str(k.n_ubatch), "--jinja", "-np", "1",
               "-lv", "4", "--cache-ram", "0", "--ctx-checkpoints", str(k.n_ctx_checkpoints)]
        if k.checkpoint_min_step is not None:
            cmd += ["--checkpoint-min-step", str(k.checkpoint_min_step)]
        return cmd + list(self.opts.extra_args)

    def _setup_command(self, setup: "ServerSetup") -> list[str]:
        args, skip = [], False
        for a in setup.args:  # the model is replayer's (the user's path may not exist here)
            if skip:
                skip = False
                continue
            if a in ("-m", "--model"):
                skip = True
                continue
            if a.startswith("--model="):
                continue
            args.append(a)
        return [str(self.opts.binary), "-m", str(self.opts.model), *args,
                "--host", "127.0.0.1", "--port", str(self.port), "-lv", "4"]

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

    def drain(self) -> None:
        """Forget the queued log lines (what came before the request about to be sent)."""
        while not self.lines.empty():
            self.lines.get_nowait()

    def left_of(self, seconds: float) -> float:
        """What is left of ``seconds`` counted from the start of the process (the first
        request's prefill: the start-up is inside ``--timeout``)."""
        return max(0.0, seconds - (time.monotonic() - self.started_at))

    def layout_phase(self, clock: Clock, first: bool = True) -> Clock:
        """Start the layout phase (``/props``, ``/apply-template``, ``/tokenize``) on ``clock``,
        inside ``--timeout``: the first prompt's layout gets what is left of it since the
        process started (the start-up, the layout and the first prefill share one deadline), a
        later turn's at most all of it; never more than ``layout_timeout`` either way."""
        limit = self.opts.request_timeout
        left = self.left_of(limit) if first else limit
        if self.opts.layout_timeout < left:
            seconds, late = self.opts.layout_timeout, None
        else:
            seconds = left
            late = (f"the server did not lay out the prompt (/apply-template, /tokenize) within the "
                    f"{limit:g} s of --timeout" + (" (its start-up counted in)" if first else ""))
        return clock.phase("layout", seconds, late=late)

    def wait_healthy(self, client: httpx.Client, clock: Clock | None = None) -> None:
        """Poll ``/health`` until it says ok: first the start phase (the server answers HTTP at
        all), then the health phase (the model loads); both count from the start of the process
        and both end within ``--timeout`` (``LiveOptions.ready_seconds``)."""
        assert self.proc is not None
        start_s, health_s = self.opts.ready_seconds()
        clock = clock or Clock(health_s)
        clock.phase("start", self.left_of(start_s),
                    late=f"llama-server did not become healthy within {start_s:g} s "
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
                clock.phase("health", self.left_of(health_s),
                            late=f"llama-server did not become healthy within {health_s:g} s "
                                 "(it answered, but its model did not finish loading)")
            if r.status_code == 200 and parse(Health, r.content, "/health reply").status == "ok":
                return
            time.sleep(0.05)
        raise clock.error()


def follow_log(path: Path, lines: "queue.Queue[tuple[float, str]]", all_lines: list[str],
               stop: threading.Event) -> None:
    """Follow a running server's ``--log-file`` from its current end (read-only; a thread)."""
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
