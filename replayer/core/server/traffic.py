"""The requests as the agent sent them: each with the thread it belongs to.

A thread is a conversation the agent keeps (the main thread, a subagent, side requests such
as titles). The importers that know threads say so on each turn; a request log's body may
carry a ``thread`` field (taken as it is, never guessed). Without either, every request is
on the main thread, which is exactly the one-slot session replay's input.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from replayer.core.prompt.turn_layouts import TurnPrompt
from replayer.core.session.turns import MAIN, thread_of

__all__ = ["Request", "MAIN", "model_of", "requests_of", "thread_of", "thread_counts"]



@dataclass(frozen=True)
class Request:
    prompt: TurnPrompt
    thread: str = MAIN
    id_slot: int = -1  # the body's ``id_slot`` (-1: the server chooses)
    sent: float | None = None  # when it reached the server (seconds; None: the file does not say)
    done: float | None = None  # when its answer was complete (None: not recorded)
    model: str = ""  # the body's ``model``: which of a router's models serves it


def _id_slot(turn) -> int:
    body = getattr(turn, "_body", None) or {}
    v = body.get("id_slot", -1) if isinstance(body, dict) else -1
    return v if isinstance(v, int) and not isinstance(v, bool) else -1


def model_of(turn) -> str:
    """The body's ``model`` (a router serves each request by it; "" when none)."""
    body = getattr(turn, "_body", None) or {}
    v = body.get("model") if isinstance(body, dict) else None
    return v if isinstance(v, str) else ""


def requests_of(prompts: list[TurnPrompt]) -> list[Request]:
    """Each turn prompt as a request on its thread, in the recorded order, with the times and
    the model its file records."""
    out = []
    for p in prompts:
        sent, done = getattr(p.turn, "times", None) or (None, None)
        out.append(Request(p, thread_of(p.turn), _id_slot(p.turn), sent, done, model_of(p.turn)))
    return out


def thread_counts(requests: list[Request]) -> dict[str, int]:
    """Requests per thread, in the order the threads first appear (what ``inspect`` shows)."""
    return dict(Counter(r.thread for r in requests))


# -- an agent-shaped stream (synthetic text: no captured prompt) ---------------------------

_WORDS = ("read the file and run the tests then report which assertion failed and why the slot "
          "kept its cache or lost it when another thread took the server batch checkpoint prompt").split()


def _text(rng, n_words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n_words))


def agent_stream(n_main: int = 62, *, burst: int = 5, seed: int = 0, words: int = 60) -> list[dict]:
    """Request bodies shaped like a coding agent's traffic, each with its ``thread``: the main
    thread's ``n_main`` turns (a growing conversation with tool results), one title request
    after its second turn, and two subagent bursts of ``burst`` requests (their own system
    prompt and growing conversation) at a third and two thirds of the way. The default is
    73 requests on four threads."""
    import random

    rng = random.Random(seed)
    system = "You are a coding agent. " + _text(rng, words * 3)
    main: list[dict] = [{"role": "system", "content": system}]
    out: list[dict] = []

    def sub_burst(name: str) -> None:
        conv = [{"role": "system", "content": f"You are the {name} subagent. " + _text(rng, words * 2)},
                {"role": "user", "content": "Task: " + _text(rng, words)}]
        for _ in range(burst):
            out.append({"thread": name, "messages": [dict(m) for m in conv], "max_tokens": 1})
            conv += [{"role": "assistant", "content": _text(rng, words // 3)},
                     {"role": "user", "content": "Result: " + _text(rng, words)}]

    for k in range(n_main):
        main.append({"role": "user", "content": (f"Turn {k}: " if k == 0 else "Tool result: ") + _text(rng, words)})
        out.append({"thread": MAIN, "messages": [dict(m) for m in main], "max_tokens": 1})
        main.append({"role": "assistant", "content": _text(rng, words // 3)})
        if k == 1:
            out.append({"thread": "title", "max_tokens": 1, "messages": [
                {"role": "system", "content": "Write a 5-word title for this conversation."},
                {"role": "user", "content": main[1]["content"]}]})
        if k in (n_main // 3, 2 * n_main // 3):
            sub_burst(f"subagent-{1 if k == n_main // 3 else 2}")
    return out
