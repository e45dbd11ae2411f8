"""A live session turn sent to the endpoint it was recorded on: Anthropic Messages or Responses.

A traffic log (``replayer record``) knows each request's endpoint and its body as the agent sent
it. Claude Code's ``/v1/messages`` and Codex's ``/v1/responses`` are converted by the server
itself, per build, before it renders them; a live replay that sent the converted chat body
instead would test replayer's copy of that conversion, not the build's. So such a turn goes to
its own endpoint with its own body (one token to generate, not streamed, ``cache_prompt``),
and what the server did is read from what it says for that endpoint:

- ``cache_n``/``prompt_n`` from the answer's ``usage`` in the endpoint's shape
  (``traffic_log.prompt_counts``: the same reader the proxy uses);
- the batches from the ``-lv 4`` log's batch starts (``cached n_tokens = S, memory_seq_rm``: these
  endpoints stream no ``prompt_progress``), timed by the log's own timestamps and scaled to the
  server's ``prompt eval time``; checkpoints and "forcing full prompt re-processing" from the same
  lines, as for a chat turn.

The events are the chat turn's (``BatchDone``, ``Progress``, checkpoints, ``TurnFinished``).
"""

from __future__ import annotations

from typing import Any, Iterator

import httpx
import orjson

from replayer.core.engine import events as ev
from replayer.core.engine.slot_turns import TurnFinished
from replayer.core.engine.live_stream import LiveResult, fact_events
from replayer.core.engine.logparse import FULL_REPROCESS, LogFact, parse_line
from replayer.core.engine.schedule import Knobs, ReasonRule
from replayer.core.errors import RunError
from replayer.core.prompt.layout import PromptLayout
from replayer.core.record.traffic_log import prompt_counts
from replayer.core.server_protocol import http_error

#: the endpoints a turn is sent to as recorded, and each one's generation limit field
#: (``/completion``: a prompt the server logged with --log-prompts-dir, sent as that text)
MAX_TOKENS_FIELD = {"/v1/messages": "max_tokens", "/v1/responses": "max_output_tokens",
                    "/responses": "max_output_tokens", "/completion": "n_predict"}
LOG_WAIT_S = 2.0  # the request's last log lines trail its answer a little


def is_wire(turn) -> bool:
    """The turn was recorded on an endpoint the server converts (sent there, not as chat)."""
    wire = getattr(turn, "wire", None)
    return wire is not None and wire[0] in MAX_TOKENS_FIELD


def wire_request(endpoint: str, body: dict[str, Any]) -> dict[str, Any]:
    """The recorded body with one token to generate, not streamed, the prompt cache on (greedy:
    ``temperature`` 0, which ``/completion`` reads as well)."""
    req = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    req[MAX_TOKENS_FIELD[endpoint]] = 1
    req.update(stream=False, temperature=0, cache_prompt=True)
    return req


def send_wire_turn(run: str, p, lay: PromptLayout, server, client: httpx.Client, knobs: Knobs, opts,
                   totals, observe_slot: bool = False) -> Iterator[Any]:
    """One recorded turn on its own endpoint: its batches and checkpoints (from the log) on the
    session's clock, then ``TurnFinished`` with the server's own counts."""
    endpoint, body = p.turn.wire
    server.drain()  # what the previous turn logged after its prefill
    first = len(server.all_lines)
    resp = client.post(server.url + endpoint, json=wire_request(endpoint, body),
                       timeout=opts.request_timeout + opts.generation_timeout)
    lines = _request_lines(server, first)
    facts = [f for f in map(parse_line, lines) if f is not None]
    starts = [f for f in facts if f.kind == "batch_start"]
    evals = [f for f in facts if f.kind == "prompt_eval"]
    if resp.status_code != 200 and not evals:  # refused before any prefill: the run ends, as a chat turn's
        raise RunError(http_error(endpoint, resp.status_code, resp.content))
    cache_n, prompt_n = _counts(resp, starts, evals, p.n_tokens)
    prompt_ms = evals[-1].values[0] if evals else 0.0
    yield from _batches(run, p.n_tokens, lay, knobs, starts, prompt_ms, totals)
    for f in facts:
        if f.kind in ("created", "erased", "restored"):
            for e in fact_events(run, f, totals.t + _since(f, starts), LiveResult(layout=lay)):
                totals.n_ckpt += isinstance(e, ev.CheckpointCreated)
                yield e
    slot = None
    if observe_slot:
        from replayer.core.server.logfacts import read_request

        slot = read_request(lines).slot
    totals.processed += prompt_n
    totals.t += prompt_ms
    yield TurnFinished(run, p.index, p.n_tokens, cache_n, prompt_n, prompt_ms,
                       any(FULL_REPROCESS in line for line in lines), totals.t, slot=slot)


def _request_lines(server, first: int) -> list[str]:
    """The log lines of the request just answered, once its slot is released (bounded wait)."""
    from replayer.core.server.live_slots import wait_idle

    wait_idle(server, first, LOG_WAIT_S)
    return list(server.all_lines[first:])


def _counts(resp: httpx.Response, starts: list[LogFact], evals: list[LogFact], n_tokens: int) -> tuple[int, int]:
    """The server's (cache_n, prompt_n): its answer's ``timings``/``usage``, else (an answer that
    failed after the prefill) its log's first batch start and prompt eval."""
    try:
        doc = orjson.loads(resp.content)
    except orjson.JSONDecodeError:
        doc = None
    if isinstance(doc, dict):
        cache_n, prompt_n = prompt_counts(doc.get("timings") if isinstance(doc.get("timings"), dict) else None,
                                          doc.get("usage") if isinstance(doc.get("usage"), dict) else None)
        if cache_n is not None and prompt_n is not None:
            return cache_n, prompt_n
    if evals:
        prompt_n = evals[-1].values[1]
        return (starts[0].values[0] if starts else n_tokens - prompt_n), prompt_n
    return 0, n_tokens


def _since(f: LogFact, starts: list[LogFact]) -> float:
    """Milliseconds from the turn's first batch start to a log line (0 without timestamps)."""
    if f.ts_ms is None or not starts or starts[0].ts_ms is None:
        return 0.0
    return max(0.0, f.ts_ms - starts[0].ts_ms)


def _batches(run: str, n_tokens: int, lay: PromptLayout, knobs: Knobs, starts: list[LogFact], prompt_ms: float,
             totals) -> Iterator[Any]:
    """``BatchDone`` + ``Progress`` for each batch the log started: ``[start_i, start_i+1)``, the
    last to the prompt's end, timed by the log's clock and summing to the server's prompt time."""
    if not starts:
        return
    reason_of = ReasonRule(n_tokens, lay.user_starts, knobs)
    pos = [f.values[0] for f in starts] + [n_tokens]
    at = [_since(f, starts) for f in starts]
    at.append(max(prompt_ms, at[-1]))
    for i in range(len(starts)):
        a, b = pos[i], pos[i + 1]
        if b <= a:
            continue
        t0, t1 = totals.t + at[i], totals.t + at[i + 1]
        yield ev.BatchDone(run=run, index=i, start=a, n_tokens=b - a, n_ubatches=-(-(b - a) // knobs.n_ubatch_eff),
                           reason=reason_of(a, b), t_start_ms=t0, t_ms=t1)
        yield ev.Progress(run=run, processed=b, total=n_tokens, t_ms=t1)
        totals.n_batches += 1
