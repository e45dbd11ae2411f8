"""Live replay of one request: a real llama-server started for the run, or one already running.

One run = start the binary (``live_server``: the one driver, 127.0.0.1, a session of its own,
healthy within ``--timeout``), lay out the prompt with the server's own ``/apply-template`` +
``/tokenize``, send the resume request with ``return_progress`` and read its progress stream
and ``-lv 4`` log (``live_stream``) into the same events as the simulator. ``attach_events``
does the same against a server someone else started, following its ``--log-file``.

Nothing the server says is believed unchecked (``protocol``), every phase has a wall-clock end
(start, health, layout, prefill, generation, and the run as a whole), and the run ends with an
explicit status: ``RunFinished`` (``complete``, or ``prefill complete, generation failed: …``
when the server failed after processing the whole prompt: its prefill facts stand) or
``RunFailed``. The server is always stopped afterwards, with everything it forked
(``processes``), whatever happened, Ctrl-C and SIGTERM included.
"""

from __future__ import annotations

import queue
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

import httpx
import orjson

from replayer.core.builds.catalog import Build
from replayer.core.engine import events as ev
from replayer.core.engine.live_server import LiveOptions, LiveServer, follow_log, live_options, resolve_server
from replayer.core.engine.live_server import free_port, port_in_use, server_memory  # noqa: F401  (the live API)
from replayer.core.engine.live_stream import LiveResult, stream
from replayer.core.processes import live_processes, stop_all, stop_started_by  # noqa: F401  (the live API)
from replayer.core.runspec import DEFAULT_TIMEOUT_S
from replayer.core.server_protocol import Clock, Guard, Health, http_error, one_line, parse
from replayer.core.engine.schedule import Knobs
from replayer.core.errors import ReplayerError, RunError
from replayer.core.prompt import templates
from replayer.core.prompt.layout import layout_of_text
from replayer.core.prompt.server_tokenizer import ServerTokenizer


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
    try:
        binary, build = resolve_server(spec, backend)
    except ReplayerError as exc:
        failed = ev.RunFailed(run=run, error=str(exc))
        if result is not None:
            result.status = failed.status
        yield failed
        return
    opts = live_options(binary, model, ctx_size=ctx_size, timeout=request_timeout, threads=threads,
                        run_timeout=run_timeout)
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
        server.layout_phase(clock)  # inside --timeout, as the start-up and the prefill are
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
        knobs = server_memory(knobs, list(server.all_lines))
        yield ev.RunStarted(run=run, label=label or build.label, build=build.label, generation=build.generation.value,
                            engine="live", n_tokens=N, settings={**settings, "binary": str(opts.binary),
                                                                  "model": str(opts.model), "port": server.port,
                                                                  "ctx_size": n_ctx, "memory": knobs.memory})
        server.drain()  # start-up lines are not part of the run
        # the start-up counted inside --timeout: the prefill gets what is left of it
        yield from stream(run, server.url, client, body, knobs, layout, server.lines, server.alive,
                          server.last_error, server.all_lines, result, clock, guard,
                          (server.left_of(opts.request_timeout), opts.generation_timeout),
                          prefill_limit=opts.request_timeout)


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
            threading.Thread(target=follow_log, args=(Path(log_file), lines, all_lines, stop), daemon=True).start()
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
            # --timeout caps the layout as it caps every phase of a run
            clock.phase("layout", min(layout_s, prefill_s),
                        late=None if layout_s < prefill_s else "the server did not lay out the prompt "
                        f"(/apply-template, /tokenize) within the {prefill_s:g} s of --timeout")
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
            yield from stream(run, url, client, body, knobs, layout, lines, lambda: True,
                              lambda: "the connection was lost", all_lines, result, clock, guard,
                              (prefill_s, generation_s), has_log=log_file is not None)
    finally:
        stop.set()
