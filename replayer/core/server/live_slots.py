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

import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from replayer.core.builds.catalog import Build
from replayer.core.engine.live import LiveOptions, LiveServer
from replayer.core.engine.live_session import _turn_prompt
from replayer.core.errors import RunError
from replayer.core.prompt import templates
from replayer.core.prompt.server_tokenizer import ServerTokenizer
from replayer.core.prompt.turn_layouts import TurnLayouts, TurnPrompt
from replayer.core.runspec import Knobs
from replayer.core.server.logfacts import LiveRequestFacts, read_request
from replayer.core.server.setup import ServerSetup
from replayer.core.server.traffic import Request, thread_of

__all__ = ["LiveRun", "run_live", "SetupServer"]


class SetupServer(LiveServer):
    """``LiveServer`` started with the user's flags instead of replayer's one-slot ones."""

    def __init__(self, opts: LiveOptions, setup: ServerSetup) -> None:
        super().__init__(opts, Knobs(), setup.n_ctx or 0)
        self.setup = setup

    def command(self) -> list[str]:
        args, skip = [], False
        for a in self.setup.args:  # the model is replayer's (the user's path may not exist here)
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


@dataclass
class LiveRun:
    prompts: list[TurnPrompt] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    facts: list[LiveRequestFacts] = field(default_factory=list)
    cache_n: list[int] = field(default_factory=list)
    prompt_n: list[int] = field(default_factory=list)
    slot: list[int] = field(default_factory=list)  # the slot the log says was selected
    n_ctx: int = 0
    lines: list[str] = field(default_factory=list)


def run_live(binary: Path, model: Path, setup: ServerSetup, turns: list, build: Build,
             request_timeout: float = 300.0) -> LiveRun:
    """Every turn on one server, in order; the server stopped at the end whatever happens."""
    out = LiveRun()
    opts = LiveOptions(binary=binary, model=model, request_timeout=request_timeout)
    with SetupServer(opts, setup) as server, httpx.Client(timeout=request_timeout) as client:
        server.wait_healthy(client)
        st = ServerTokenizer(server.url, client)
        tpl = st.template()
        out.n_ctx = st.n_ctx() or 0
        layouts = TurnLayouts([], tpl, templates.delimiters_for(tpl, build), "server", True)
        for turn in turns:
            p, _ = _turn_prompt(turn, st, layouts, build)
            req = Request(p, thread_of(turn), int((turn.body or {}).get("id_slot", -1)))
            first = len(server.all_lines)
            body = {**turn.body, "max_tokens": 1, "cache_prompt": True, "stream": False}
            body.pop("thread", None)
            r = client.post(server.url + "/v1/chat/completions", json=body)
            _wait_idle(server, first)
            lines = server.all_lines[first:]
            facts = read_request(lines)
            timings = r.json().get("timings", {}) if r.status_code == 200 else {}
            if "prompt_n" in timings:
                cache_n, prompt_n = int(timings["cache_n"]), int(timings["prompt_n"])
            elif facts.prompt_n is not None:
                # a tiny random model's token can fail the reply's parser after the prefill: the log has the facts
                prompt_n = facts.prompt_n
                cache_n = p.n_tokens - prompt_n
            else:
                raise RunError(f"/v1/chat/completions: HTTP {r.status_code}: {r.text[:200]}")
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


def _wait_idle(server: LiveServer, first: int, timeout: float = 5.0) -> None:
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
