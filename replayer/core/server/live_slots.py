"""A real llama-server in the user's setup, fed the same requests: per request what it chose and reused.

The server starts with the user's own flags; replayer adds only what it needs to observe it
(``--host 127.0.0.1``, a free ``--port``, ``-lv 4``). Each request is laid out by the server
(``/apply-template`` + ``/tokenize``, so the simulation runs on the server's own tokens) and
sent as the agent sent it to ``/v1/chat/completions`` with ``max_tokens: 1`` and
``cache_prompt`` (the chat path: the server knows where the user messages start, which its
checkpoints depend on); the answer gives ``timings.cache_n`` and ``prompt_n`` (the log's
"prompt eval" line when a tiny model's reply fails its parser after the prefill), the log
lines it caused the slot, the host-cache saves, loads and evictions and the checkpoints
(``logfacts``).
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from replayer.core.builds.catalog import Build
from replayer.core.engine.live_server import LiveOptions, LiveServer
from replayer.core.errors import RunError
from replayer.core.prompt import templates
from replayer.core.prompt.server_tokenizer import ServerTokenizer
from replayer.core.prompt.turn_layouts import TurnLayouts, TurnPrompt, server_turn_prompt
from replayer.core.runspec import Knobs
from replayer.core.server.logfacts import LiveRequestFacts, read_request
from replayer.core.server.setup import ServerSetup
from replayer.core.server.traffic import Request, thread_of

__all__ = ["LiveRun", "run_live", "SetupServer", "wait_idle"]


class SetupServer(LiveServer):
    """``LiveServer`` started with the user's flags instead of replayer's one-slot ones (the
    driver's ``setup``: replayer adds only host, port and ``-lv 4``)."""

    def __init__(self, opts: LiveOptions, setup: ServerSetup) -> None:
        super().__init__(opts, Knobs(), 0, setup=setup)


class RouterServer(SetupServer):
    """A router (``--models-preset``): it spawns the model's child server, whose log lines it
    relays prefixed by the child's port on its stdout — the same lines, read the same way."""

    streams = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}

    def __init__(self, opts: LiveOptions, setup: ServerSetup, preset: Path) -> None:
        super().__init__(opts, setup)
        self.preset = preset

    def command(self) -> list[str]:
        cmd = super().command()
        router_args = [a for a in cmd[3:] if a not in ("-m", str(self.opts.model))]
        return [cmd[0], "--models-preset", str(self.preset), *router_args]


class _RouterTokenizer(ServerTokenizer):
    """``ServerTokenizer`` naming the model, as a router needs on every call."""

    def __init__(self, url: str, client: httpx.Client, model: str) -> None:
        super().__init__(url, client)
        self.model = model

    def _call(self, method: str, path: str, body: dict | None = None) -> httpx.Response:
        if method == "GET":
            return super()._call(method, f"{path}?model={self.model}", body)
        return super()._call(method, path, {**(body or {}), "model": self.model})


@dataclass
class LiveRun:
    prompts: list[TurnPrompt] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    facts: list[LiveRequestFacts] = field(default_factory=list)
    cache_n: list[int] = field(default_factory=list)
    prompt_n: list[int] = field(default_factory=list)
    slot: list[int] = field(default_factory=list)  # the slot the log says was selected
    slept: list[bool] = field(default_factory=list)  # the log says the server slept since the previous request
    n_ctx: int = 0
    lines: list[str] = field(default_factory=list)


def run_live(binary: Path, model: Path, setup: ServerSetup, turns: list, build: Build,
             request_timeout: float = 300.0, router: tuple[Path, str] | None = None,
             pauses: list[float] | None = None) -> LiveRun:
    """Every turn on one server, in order; the server stopped at the end whatever happens.
    ``router``: (preset INI, model section) — a router started with the preset, asked for that
    model, or for the model a turn's body names. ``pauses``: seconds to wait before each turn
    (real sleeps: what ``--sleep-idle-seconds`` acts on); each request's times are recorded."""
    out = LiveRun()
    opts = LiveOptions(binary=binary, model=model, request_timeout=request_timeout)
    server = SetupServer(opts, setup) if router is None else RouterServer(opts, setup, router[0])
    # a router's proxy closes kept-alive connections it has answered: a new connection per call
    limits = httpx.Limits(max_keepalive_connections=0) if router is not None else httpx.Limits()
    with server, httpx.Client(timeout=request_timeout, limits=limits) as client:
        server.wait_healthy(client)
        if router is not None:
            _load_model(server, client, router[1], request_timeout)
        per_model: dict[str, tuple[ServerTokenizer, TurnLayouts]] = {}  # a router's models: one each
        mark = len(server.all_lines)
        for k, turn in enumerate(turns):
            if pauses and pauses[k] > 0:
                time.sleep(pauses[k])
            name = (turn.body or {}).get("model") or router[1] if router is not None else ""
            if router is not None and _status(server, client, name) not in ("loaded", "sleeping"):
                _load_model(server, client, name, request_timeout)  # unloaded by --models-max: load it first
            if name not in per_model:
                st = (ServerTokenizer(server.url, client) if router is None
                      else _RouterTokenizer(server.url, client, name))
                tpl = st.template()
                out.n_ctx = out.n_ctx or st.n_ctx() or 0
                per_model[name] = st, TurnLayouts([], tpl, templates.delimiters_for(tpl, build), "server", True)
            st, layouts = per_model[name]
            p, _ = server_turn_prompt(turn, st, layouts, build)
            first = len(server.all_lines)
            out.slept.append(any("entering sleeping state" in ln for ln in server.all_lines[mark:first]))
            body = {**turn.body, "max_tokens": 1, "cache_prompt": True, "stream": False}
            if router is not None:
                body["model"] = name
            body.pop("thread", None)
            sent = time.monotonic()
            r = client.post(server.url + "/v1/chat/completions", json=body)
            done = time.monotonic()
            req = Request(p, thread_of(turn), int((turn.body or {}).get("id_slot", -1)), sent, done,
                          name if router is not None else "")
            wait_idle(server, first)
            mark = len(server.all_lines)
            facts = read_request(server.all_lines[first:])
            cache_n, prompt_n = _counts(r, facts, p)
            out.prompts.append(p)
            out.requests.append(req)
            out.cache_n.append(cache_n)
            out.prompt_n.append(prompt_n)
            out.slot.append(facts.slot)
            out.facts.append(facts)
        if not server.alive():
            raise RunError(f"llama-server died: {server.last_error()}")
        out.lines = list(server.all_lines)
    return out


def _counts(r: httpx.Response, facts: LiveRequestFacts, p: TurnPrompt) -> tuple[int, int]:
    """(cache_n, prompt_n) of an answer: its ``timings``, else the log's "prompt eval" line (a
    tiny random model's token can fail the reply's parser after the prefill)."""
    timings = r.json().get("timings", {}) if r.status_code == 200 else {}
    if "prompt_n" in timings:
        return int(timings["cache_n"]), int(timings["prompt_n"])
    if facts.prompt_n is not None:
        return p.n_tokens - facts.prompt_n, facts.prompt_n
    raise RunError(f"/v1/chat/completions: HTTP {r.status_code}: {r.text[:200]}")


def _status(server: LiveServer, client: httpx.Client, name: str) -> str | None:
    """A router's model's status in ``GET /models`` (loaded, loading, unloaded, sleeping)."""
    models = client.get(server.url + "/models").json().get("data", [])
    return next((m.get("status", {}).get("value") for m in models if m.get("id") == name), None)


def _load_model(server: LiveServer, client: httpx.Client, name: str, timeout: float) -> None:
    """A router's ``POST /models/load``, then ``GET /models`` until the model says loaded (a call
    proxied to a child still loading can be dropped)."""
    r = client.post(server.url + "/models/load", json={"model": name})
    if r.status_code != 200:
        raise RunError(f"router: /models/load {name}: HTTP {r.status_code}: {r.text[:200]}")
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not server.alive():
            raise RunError(f"router died: {server.last_error()}")
        state = _status(server, client, name)
        if state == "loaded":
            return
        if state is None:
            raise RunError(f"router: no model {name!r} in its preset")
        time.sleep(0.1)
    raise RunError(f"router: {name} did not load within {timeout:g} s")


def wait_idle(server: LiveServer, first: int, timeout: float = 5.0) -> None:
    """Until the request's slot is released ("all slots are idle" after it)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if any("all slots are idle" in ln for ln in server.all_lines[first:]):
            return
        time.sleep(0.01)


def _cache_key(events) -> list[tuple[str, int]]:
    """A request's host-cache events, comparable between engines: kind, and the tokens where the log names them."""
    return sorted((k, n if k in ("saved", "skipped", "removed") else -1) for k, n in events)


def sim_key(f) -> tuple:
    """A simulated request's facts (``slots.RequestFacts``) as compared with the server's."""
    s = f.schedule
    return (f.slot, f.selected, f.cache_n, f.prompt_n, _cache_key((e.kind, e.n_tokens) for e in f.cache),
            f.purged, [c.n_tokens for c in s.checkpoints] if s else [],
            sorted((e.reason, e.checkpoint.n_tokens) for e in s.erased) if s else [],
            s.restored.n_tokens if s and s.restored else None)


def live_key(run: LiveRun, i: int) -> tuple:
    """The server's facts of request ``i``, in ``sim_key``'s shape."""
    f = run.facts[i]
    return (run.slot[i], f.selected, run.cache_n[i], run.prompt_n[i], _cache_key((k, n) for k, n, _ in f.cache),
            f.purged, f.created, sorted(f.erased), f.restored)
