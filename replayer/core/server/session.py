"""``replay --mode session --server-args "…"``: the session's turns through the user's server setup.

The one-slot session replay (``engine.slot_turns``) walks every turn on one slot; with a server
command line the turns go through ``ServerSim`` instead — its slots, host cache and idle-slot
saves — and each turn's schedule is the chosen slot's. The rest of the session replay (events,
records, the misses' explanations) is unchanged: it reads the same (prompt, common prefix,
schedule, full re-processing) per turn.
"""

from __future__ import annotations

import dataclasses
from typing import Iterator

from replayer.core.engine.schedule import Schedule
from replayer.core.engine.simulate import RunSpec
from replayer.core.hardware import gguf_model
from replayer.core.prompt.turn_layouts import TurnPrompt
from replayer.core.server.help import help_for
from replayer.core.server.lifecycle import ServerLife, life_notes
from replayer.core.server.setup import ServerSetup, parse_server_args
from replayer.core.server.slots import ServerSim
from replayer.core.server.state_size import from_gguf
from replayer.core.server.traffic import Request, requests_of

__all__ = ["check_server_args", "server_context", "server_setup", "server_slot_turns", "server_why", "setup_notes",
           "fix_flags", "price_fixes"]

#: the context of a server whose limit is unknown (no -c, no GGUF): larger than any prompt
NO_LIMIT = 1 << 40
_KNOBS = {"n_batch": "n_batch", "n_ubatch": "n_ubatch", "n_ctx_checkpoints": "n_ctx_checkpoints",
          "checkpoint_min_step": "checkpoint_min_step"}


def server_setup(server_args: str, spec: RunSpec) -> ServerSetup:
    return parse_server_args(server_args, help_for(spec.build.effective_number))


def setup_knobs(setup: ServerSetup, knobs, **extra):
    """The run's knobs with the batch sizes and checkpoint flags the user's command line gives
    (both engines: the simulation, and the live run's batch break reasons)."""
    return dataclasses.replace(knobs, **extra, **{k: setup.given[g] for g, k in _KNOBS.items() if g in setup.given})


def server_context(setup: ServerSetup, n_ctx: int | None, gguf) -> tuple[int | None, str]:
    """The server's whole context and where it comes from: the command line's ``-c``, else
    replayer's ``--ctx-size``, else what llama-server's own ``-c 0`` means — the model's training
    context, read from the GGUF; without a GGUF, no limit (None), as the one-slot replay."""
    if setup.n_ctx:
        return setup.n_ctx, f"-c {setup.n_ctx} (the command line)"
    if n_ctx:
        return n_ctx, f"--ctx-size {n_ctx}"
    if gguf is not None and gguf.n_ctx_train:
        return gguf.n_ctx_train, f"-c 0: the model's training context, {gguf.n_ctx_train}"
    return None, "-c 0 without a GGUF: the model's training context is unknown, so no context limit"


def _server(server_args: str, spec: RunSpec, prompts: list[TurnPrompt], model: str | None,
            n_ctx: int | None, requests: list[Request] | None = None) -> tuple[ServerSetup, ServerLife, list[Request]]:
    setup = server_setup(server_args, spec)
    gguf = gguf_model.read(model) if model and gguf_model.is_gguf_path(model) else None
    total, _ = server_context(setup, n_ctx, gguf)
    per_slot = None if total is None else total if setup.kv_unified else total // max(1, setup.n_parallel)
    knobs = setup_knobs(setup, spec.knobs, n_ctx=per_slot)
    sizes = from_gguf(gguf) if gguf else None
    life = ServerLife(setup, lambda: ServerSim(setup, spec.build, knobs, sizes, total or NO_LIMIT))
    return setup, life, requests if requests is not None else requests_of(prompts)


def server_slot_turns(server_args: str, spec: RunSpec, prompts: list[TurnPrompt], model: str | None,
                      n_ctx: int | None, restarts: dict[int, tuple[str, str]] | None = None,
                      requests: list[Request] | None = None
                      ) -> Iterator[tuple[TurnPrompt, int, Schedule | None, bool, int]]:
    """Every turn through the user's server: (prompt, common prefix with the chosen slot,
    its schedule — None when the prompt does not fit the slot — full re-processing, the slot).
    ``restarts``: filled, turn by turn, with the turns before which the model's server started
    over (turn index → (``slept`` / ``unloaded``, what happened)) — what ``misses`` names.
    ``requests``: ``requests_of(prompts)`` when the caller keeps it (both builds share the prompts)."""
    _, sim, requests = _server(server_args, spec, prompts, model, n_ctx, requests)
    if restarts is not None:
        restarts.clear()
    for f, r in zip(sim.run(requests), requests):
        if restarts is not None and f.lost_state:
            restarts[r.prompt.index] = (f.lost_state, f"{f.lost_cause} (would keep it: {f.lost_fix})")
        yield r.prompt, f.common_prefix, f.schedule, f.full_reprocess, f.slot


def server_why(server_args: str, spec: RunSpec, prompts: list[TurnPrompt], model: str | None,
               n_ctx: int | None) -> list[dict]:
    """Per request after a thread's first: its thread, the slot it ran on, where its state was
    kept (``server.why``) and, when it lost tokens, what took them and the flag that keeps them.
    A second walk of the same simulation (the report's, not the stream's: a few ms per 100 turns)."""
    from replayer.core.server.why import explain

    setup, sim, requests = _server(server_args, spec, prompts, model, n_ctx)
    facts = list(sim.run(requests))
    out = []
    for r, f, w in zip(requests, facts, explain(setup, requests, facts)):
        if w is not None:
            out.append({**w.to_dict(), "request": r.prompt.index, "slot": f.slot})
    return out


def fix_flags(why: list[dict]) -> dict[str, tuple[int, int]]:
    """The one-flag fixes the ``why`` entries name: flag → (the largest value asked, entries)."""
    wanted: dict[str, tuple[int, int]] = {}
    for w in why:
        words = (w.get("fix") or "").split()
        if len(words) == 2 and words[0].startswith("-") and words[1].lstrip("-").isdigit():
            v, n = wanted.get(words[0], (int(words[1]), 0))
            wanted[words[0]] = (max(v, int(words[1])), n + 1)
    return wanted


def price_fixes(server_args: str, spec: RunSpec, prompts: list[TurnPrompt], model: str | None,
                n_ctx: int | None, why: list[dict]) -> list[dict]:
    """Each flag the ``why`` entries name as the one that would have kept a thread's state,
    priced by the same simulation: the stream's re-processed tokens with it added to the
    command line (the largest value any entry asks for), against without. A fix that is not
    one flag and a number (``-c larger, or --no-kv-unified``) is named, not priced."""
    from replayer.core.errors import ReplayerError

    wanted = fix_flags(why)
    if not wanted:
        return []
    base = _processed(server_args, spec, prompts, model, n_ctx)
    out = []
    for flag, (value, n) in wanted.items():
        try:
            with_it = _processed(f"{server_args} {flag} {value}", spec, prompts, model, n_ctx)
        except ReplayerError:  # a flag this build does not take
            continue
        out.append({"flag": f"{flag} {value}", "requests": n, "prompt_n": base, "prompt_n_with": with_it,
                    "saved_tokens": base - with_it})
    return sorted(out, key=lambda d: -d["saved_tokens"])


def _processed(server_args: str, spec: RunSpec, prompts: list[TurnPrompt], model: str | None,
               n_ctx: int | None) -> int:
    _, life, requests = _server(server_args, spec, prompts, model, n_ctx)
    return sum(f.prompt_n for f in life.run(requests))


def check_server_args(text: str, config) -> str:
    """The command line (``@file``: read from that file), parsed for builds A and B now so that
    an unknown flag is one line before anything runs."""
    from pathlib import Path

    from replayer.core.errors import ReplayerError
    from replayer.core.replay import run_spec

    if text.startswith("@"):
        p = Path(text[1:]).expanduser()
        try:
            if p.stat().st_size > 100_000:
                raise ReplayerError(f"{p}: a command line larger than 100 kB")
            text = p.read_text(encoding="utf-8", errors="replace").replace("\\\n", " ")
        except OSError as exc:
            raise ReplayerError(f"--server-args {p}: {exc.strerror or exc}") from None
    for run in ("A", "B"):
        server_setup(text, run_spec(run, config))
    return text


def setup_notes(text: str, config, turns: list | None = None) -> list[str]:
    """What the report should say about the setup: the flags dropped, the context assumed, a
    host-cache limit that cannot be priced without the model's state sizes (no GGUF), and
    what sleep and a router's unloads can be simulated from (``turns``: their times, models)."""
    from replayer.core.replay import run_spec

    setup = server_setup(text, run_spec("A", config))
    notes = [f"server: {setup.label()} (b{setup.build}'s defaults from {setup.help_source})", *setup.notes]
    gguf = gguf_model.read(config.model) if config.model and gguf_model.is_gguf_path(config.model) else None
    notes.append(f"server: context {server_context(setup, config.ctx_size, gguf)[1]}")
    if setup.cache_ram_mib > 0 and gguf is None:
        notes.append("server: --cache-ram's limit is not simulated without a GGUF --model (state sizes unknown)")
    notes += life_notes(setup, turns or [])
    if getattr(config, "engine", "simulated") == "live":
        from replayer.core.server.lifecycle import is_router

        if setup.sleep_idle_seconds is not None and setup.sleep_idle_seconds >= 0:
            notes.append("live: the requests are sent one after the other without the recorded pauses, so the real "
                         "server does not sleep between them where the simulation does")
        if is_router(setup):
            notes.append("live: one llama-server, not a router: --models-max unloads are simulated only")
    return notes
