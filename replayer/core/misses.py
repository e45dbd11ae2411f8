"""Why a turn re-processed more than its new messages: the first differing token, and the cause.

A turn *misses* when the server reused fewer tokens than the previous prompt *of the same
thread* gave it (``cache_n < min(previous prompt, this prompt − 1)``; the −1 is the token the
server always re-evaluates). A thread is a conversation the agent keeps (``server.traffic``:
the main thread, a subagent, side requests); a thread's first request is compared with
nothing — a subagent's own system prompt is not a change of the main thread's. The causes,
checked in this order:

- ``context_full``: the prompt does not fit the slot; the server refused it.
- ``server_slept`` / ``model_unloaded`` (with ``--server-args``, ``server.lifecycle``): the
  server slept after ``--sleep-idle-seconds`` of idleness, or a router stopped the model for
  ``--models-max``, since the thread's previous request: every slot and the host cache started
  over.
- ``compaction``: the request holds fewer messages than the previous one — the history was
  replaced (a compaction, or a rewind).
- ``template_dropped_reasoning``: the first change lies inside an earlier assistant message
  whose reasoning the previous prompt showed and this one does not (templates that keep
  reasoning only after the last user message).
- ``client_changed``: any other change of earlier text (system prompt, tools, a message).
- ``no_usable_checkpoint``: the prompts agree further than the server could reuse: SWA or
  recurrent memory can only roll back to a context checkpoint at or below the change, and
  none fitted (the checkpoints held are listed).
- ``thread_switch``: the prompts agree as far as they could be reused, but other threads'
  requests ran since this thread's previous one and the server no longer held its state
  (one slot without a host cache; with ``--server-args``, ``server.why`` names what took it).

The lost time of a miss is its share of the turn's prompt time: lost tokens / processed.
"""

from __future__ import annotations

from typing import Any

from replayer.core.engine.slot_turns import SessionRun, TurnRecord
from replayer.core.prompt import templates
from replayer.core.prompt.layout import scan_text
from replayer.core.prompt.turn_layouts import TurnPrompt, shared_prefix
from replayer.core.server.traffic import thread_of

CAUSES = ("client_changed", "template_dropped_reasoning", "compaction", "no_usable_checkpoint", "context_full",
          "thread_switch", "server_slept", "model_unloaded")
_RESTART_CAUSES = {"slept": "server_slept", "unloaded": "model_unloaded"}
_ROLE_NAMES = {"user": "user message", "assistant": "assistant message", "tool": "tool result", "system": "system prompt"}


def _line_at(text: str, pos: int, width: int = 100) -> str:
    a = text.rfind("\n", 0, pos) + 1
    b = text.find("\n", pos)
    b = len(text) if b < 0 else b
    if b - a > width:  # a long line: a window around the change
        a = max(a, pos - width // 2)
        b = min(b, a + width)
    return text[a:b]


def locate(old: TurnPrompt, new: TurnPrompt, n_chars: int, delims: list[templates.Delimiter]) -> dict[str, Any]:
    """Which message and line of the new prompt the first change falls in, old and new text."""
    text = new.text
    d = min(n_chars, len(text))
    marks = [(r, c) for r, c in scan_text(text, delims) if c <= d]
    if not marks or marks[-1][0] == "system":
        what, start = "system prompt", (marks[-1][1] if marks else 0)
        if old.turn.tools != new.turn.tools and _system(old) == _system(new):
            what = "tools"
    else:
        role, start = marks[-1]
        what = f"{_ROLE_NAMES.get(role, role)} {sum(1 for r, _ in marks if r == role)}"
    line = text.count("\n", start, d) + 1
    return {"where": f"{what} line {line}", "old_text": _line_at(old.text, d), "new_text": _line_at(text, d),
            "char": d}


def _system(p: TurnPrompt) -> Any:
    m = p.turn.messages
    return m[0].get("content") if m and m[0].get("role") in ("system", "developer") else None


def _dropped_reasoning(old: TurnPrompt, new: TurnPrompt, d: int) -> bool:
    """The old prompt shows, at the change, reasoning of an assistant message the new one omits."""
    window = old.text[d:d + 400]
    for m in new.turn.messages:
        r = m.get("reasoning_content") or m.get("reasoning")
        if m.get("role") == "assistant" and isinstance(r, str) and r:
            probe = r[:200]
            if probe and (probe[:40] in window or window[:40] in r) and probe not in new.text[d:d + len(r) + 400]:
                return True
    return False


def _checkpoint_detail(t: TurnRecord, change: int) -> str:
    if t.restored is not None:
        return (f"restored the checkpoint at {t.restored.n_tokens} tokens (the newest at or below the change at "
                f"{change}); re-processed from {t.cache_n}")
    if not t.held:
        return "no context checkpoint existed: the whole prompt was re-processed"
    below = [c for c in t.held if c[2] <= change]
    where = ", ".join(str(c[0]) for c in t.held[:8]) + (" …" if len(t.held) > 8 else "")
    if not below:
        return (f"{len(t.held)} checkpoint(s) existed (at {where} tokens), none at or below the change at "
                f"{change}: forcing full prompt re-processing")
    return (f"{len(t.held)} checkpoint(s) existed (at {where} tokens); those below the change at {change} "
            f"keep too many positions for the window (pos_min not below the threshold)")


def explain(run: SessionRun, prompts: list[TurnPrompt], delims: list[templates.Delimiter], start: int = 0,
            restarts: dict[int, tuple[str, str]] | None = None) -> None:
    """Attach a ``cause`` (and the first differing token, where any) to every missed turn, from
    ``run.turns[start]`` on (the app explains the turns that finished since its last repaint).
    Each turn is compared with the previous request of its own thread. ``restarts``: the turns
    before which the server started over (``server.session.server_slot_turns``)."""
    by_turn = {p.index: p for p in prompts}
    prev: dict[str, tuple[TurnPrompt, int, int]] = {}  # thread → (prompt, n_prompt, position in run.turns)
    for k, t in enumerate(run.turns[:start]):  # the turn each later one of its thread is compared with
        p = by_turn.get(t.turn)
        if p is not None and not t.error:
            prev[thread_of(p.turn)] = (p, t.n_prompt, k)
    for k, t in enumerate(run.turns[start:], start):
        p = by_turn.get(t.turn)
        if p is None:
            continue
        if t.error:
            t.cause = {"cause": "context_full", "detail": t.error, "lost_tokens": 0, "lost_ms": 0.0}
            continue
        thread = thread_of(p.turn)
        if thread in prev:
            before, prev_n, at = prev[thread]
            ideal = min(prev_n, t.n_prompt - 1)
            lost = ideal - t.cache_n
            if lost > 0 and restarts and t.turn in restarts:
                kind, detail = restarts[t.turn]
                t.cause = {"cause": _RESTART_CAUSES[kind], "detail": detail, "first_diff_token": None,
                           "lost_tokens": lost,
                           "lost_ms": round(t.prompt_ms * lost / t.prompt_n, 3) if t.prompt_n else 0.0}
            elif lost > 0:
                t.cause = _cause(t, before, p, ideal, lost, delims, _between(run, by_turn, at, k, thread))
        prev[thread] = (p, t.n_prompt, k)


def _between(run: SessionRun, by_turn: dict[int, TurnPrompt], a: int, b: int, thread: str) -> dict[str, int]:
    """Requests of other threads between positions ``a`` and ``b`` of the run, per thread."""
    out: dict[str, int] = {}
    for t in run.turns[a + 1:b]:
        p = by_turn.get(t.turn)
        th = thread_of(p.turn) if p is not None else thread
        if th != thread:
            out[th] = out.get(th, 0) + 1
    return out


def _cause(t: TurnRecord, prev: TurnPrompt, p: TurnPrompt, ideal: int, lost: int,
           delims: list[templates.Delimiter], others: dict[str, int]) -> dict[str, Any]:
    shared = shared_prefix(prev, p)
    cause: dict[str, Any] = {"lost_tokens": lost,
                             "lost_ms": round(t.prompt_ms * lost / t.prompt_n, 3) if t.prompt_n else 0.0}
    if shared.n_tokens < ideal:
        loc = locate(prev, p, shared.n_chars, delims)
        if p.turn.n_messages < prev.turn.n_messages:
            kind = "compaction"
        elif _dropped_reasoning(prev, p, shared.n_chars):
            kind = "template_dropped_reasoning"
        else:
            kind = "client_changed"
        cause.update(cause=kind, first_diff_token=shared.n_tokens, **loc)
        if t.cache_n < shared.n_tokens - 1:
            cause["checkpoint"] = _checkpoint_detail(t, shared.n_tokens)
    elif others:
        ran = ", ".join(f"{th} ({n} request{'s' if n != 1 else ''})" for th, n in others.items())
        cause.update(cause="thread_switch", first_diff_token=None,
                     detail=f"{ran} ran since this thread's previous request; its state was no longer held")
    else:
        cause.update(cause="no_usable_checkpoint", first_diff_token=None,
                     checkpoint=_checkpoint_detail(t, shared.n_tokens))
    return cause


def lost_by_cause(run: SessionRun) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for t in run.turns:
        if t.cause:
            c = out.setdefault(t.cause["cause"], {"turns": 0, "tokens": 0, "ms": 0.0})
            c["turns"] += 1
            c["tokens"] += t.cause.get("lost_tokens", 0)
            c["ms"] = round(c["ms"] + t.cause.get("lost_ms", 0.0), 3)
    return out
