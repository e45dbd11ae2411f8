"""Each compaction's own summarization request, as a turn of the ``compaction`` thread.

An agent compacts by sending one more request: the history before the compaction as it sends
it, then its summarization prompt; the reply is the summary the next requests start from. The
server prefills that request like any other (usually on the conversation's cached prefix), so
a session replay without it mispredicts the cache around the compaction. The importer says
what it was sent with (``Summarization``: how much of the history, the prompt where the file
stores it, the reply); the agent's prompt, system prompt and tools for it come from a capture
that ran a compaction (``agents.apply.summarization_parts``), or the turn lacks the prompt and
a note says how many tokens.
"""

from __future__ import annotations

from typing import Any

from replayer.core.session.model import EarlierHistory, Session
from replayer.core.session.request import ChatRequest, message_to_openai

#: the thread of the summarization requests (beside the main one and the subagents')
THREAD = "compaction"


def summarization_body(s: Session, h: EarlierHistory,
                       req: ChatRequest) -> tuple[dict[str, Any], int, list[str]] | None:
    """The summarization request of the compaction after ``h`` (``req``: the request of that
    history as rebuilt, system prompt and tools included), its reply after it: (body, how many
    of its messages were sent, notes); None when the importer knows of none. The history is
    sent without the parts an agent adds before a run's first prompt (Qwen Code's date
    reminder: a compression starts no run of its own)."""
    from replayer.core.agents.apply import summarization_parts

    sm = h.summarization
    if sm is None:
        return None
    parts = summarization_parts(s)
    body = req.body
    msgs = req.plain_messages if req.plain_messages is not None else body["messages"]
    off = max(0, len(msgs) - len(h.messages))  # the system message the request put before the history
    head: list[dict[str, Any]] = []
    if parts.system == "same":
        head = msgs[:off]
    elif parts.system == "own" and parts.system_prompt:
        head = [{"role": parts.system_role, "content": parts.system_prompt}]
    out = head + list(msgs[off:off + sm.upto])
    prompt = sm.prompt if sm.prompt is not None else parts.prompt
    if sm.context is not None:  # the history written into the prompt; without the prompt, the history alone
        prompt = _with_conversation(prompt, sm.context) or sm.context
    if prompt is not None:
        _add_prompt(out, prompt, merge=parts.api == "anthropic")
    n = len(out)
    if n == len(head):  # neither history nor prompt known: nothing of the request to rebuild
        return None
    if sm.reply is not None:
        out.append(message_to_openai(sm.reply))
    new = {k: v for k, v in body.items() if k not in ("messages", "tools")}
    new["messages"] = out
    tools = body.get("tools") if parts.tools == "same" else parts.own_tools if parts.tools == "own" else None
    if tools:
        new["tools"] = tools
    return new, n, ([] if sm.prompt is not None else parts.notes)


def _add_prompt(out: list[dict[str, Any]], prompt: str, *, merge: bool) -> None:
    """The summarization prompt as the next user message. The Anthropic API's turns alternate:
    Claude Code adds it as one more text block of its last user message — after tool results the
    server's conversion makes it a user message of its own; after user text, one more part."""
    last = out[-1] if out else None
    if merge and last is not None and last.get("role") == "user":
        c = last.get("content")
        parts = list(c) if isinstance(c, list) else [{"type": "text", "text": c or ""}]
        out[-1] = {**last, "content": parts + [{"type": "text", "text": prompt}]}
        return
    out.append({"role": "user", "content": prompt})


def _with_conversation(prompt: str | None, context: str) -> str | None:
    """A captured summarization prompt with this compaction's history in its ``<conversation>``
    block (the capture's own run's history taken out); None when it has no such block."""
    if prompt is None:
        return None
    open_, close = "<conversation>\n", "\n</conversation>"
    i = prompt.find(open_)
    j = prompt.find(close, i + len(open_)) if i >= 0 else -1
    return prompt[:i + len(open_)] + context + prompt[j:] if j >= 0 else None
