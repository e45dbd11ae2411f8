"""OpenCode's summarization request for one compaction, as 1.18.33 builds it (``SessionCompaction.process``).

OpenCode does not send the history as messages: it writes it into one user message, each stored
message serialized (``[User]: …``, ``[Assistant reasoning]: …``, ``[Assistant tool call]:
name(JSON input)``, ``[Tool result]: …`` cut at 2,000 characters; one message's lines joined by
newlines, messages by blank lines) inside a ``<conversation>`` block of its summarization prompt,
sent with its compaction agent's own system prompt and no tools. What goes in: the stored
messages before the compaction's own message, without earlier compactions' requests and
summaries, and without the recent turns it keeps (from the part's ``tail_start_id``). The prompt
around the block is its code (from a capture, ``summarize``). Read from the 1.18.33 binary's
bundled JS and checked against its requests (tests/agents/test_opencode_compaction.py).
"""

from __future__ import annotations

import json
from typing import Any

from replayer.core.session.model import Message, Summarization
from replayer.core.session.reader import ms_to_s

#: a tool result longer than this is cut, with a line saying so (``Ed`` in 1.18.33)
RESULT_LIMIT = 2000


def summarization(messages: list[dict], parts: dict[str, list[dict]], at: int, earlier: list[int],
                  notes: list[str]) -> Summarization:
    """The summarization request of the compaction whose user message is ``messages[at]``
    (``earlier``: the indexes of the completed compactions before it)."""
    cid = messages[at].get("id")
    ids = [messages[k].get("id") for k in earlier]
    summaries = {i for i, m in enumerate(messages) if m.get("role") == "assistant" and m.get("summary") is True
                 and any(m.get("parentID") == x for x in ids)}
    left_out = set(earlier) | summaries
    before = [m for i, m in enumerate(messages[:at]) if i not in left_out]
    tail = next((p.get("tail_start_id") for p in parts.get(cid, []) if p.get("type") == "compaction"
                 and isinstance(p.get("tail_start_id"), str)), None)
    start = next((i for i, m in enumerate(before) if m.get("id") == tail), None) if tail else None
    head = before[:start] if start else before
    context = "\n\n".join(t for m in head if (t := _serialized(m, parts.get(m.get("id"), []))))
    if summaries:
        notes.append("an OpenCode compaction after another sends the earlier summary and its instructions to "
                     "combine them (its code, not captured): that summarization request is rebuilt without them")
    reply = next((m for m in messages[at + 1:] if m.get("role") == "assistant" and m.get("summary") is True
                  and m.get("parentID") == cid), None)
    text = "\n\n".join(p["text"].strip() for p in parts.get(reply.get("id"), []) if p.get("type") == "text"
                       and isinstance(p.get("text"), str) and p["text"].strip()) if reply else ""
    times = reply.get("time") if reply and isinstance(reply.get("time"), dict) else {}
    when = ms_to_s(times.get("created"))
    return Summarization(upto=0, context=context, timestamp=when,
                         reply=Message(role="assistant", content=text, origin="compaction_summary") if text else None)


def _serialized(m: dict, ps: list[dict]) -> str:
    """One stored message as OpenCode writes it into the summarization prompt."""
    if m.get("role") == "user":
        text = "\n".join(p["text"] for p in ps if p.get("type") == "text" and not p.get("ignored")
                         and isinstance(p.get("text"), str) and p["text"])
        files = [f"[Attached {p.get('mime')}: {p.get('filename') or 'file'}]" for p in ps if p.get("type") == "file"]
        return "\n".join(([f"[User]: {text}"] if text else []) + files)
    lines: list[str] = []
    for p in ps:
        t = p.get("type")
        if t in ("text", "reasoning") and isinstance(p.get("text"), str) and p["text"]:
            lines.append(f"[Assistant{' reasoning' if t == 'reasoning' else ''}]: {p['text']}")
        elif t == "tool":
            lines += _tool_lines(p)
    return "\n".join(lines)


def _tool_lines(p: dict) -> list[str]:
    st = p.get("state") if isinstance(p.get("state"), dict) else {}
    call = f"[Assistant tool call]: {p.get('tool')}({_js_json(st)})"
    if st.get("status") == "completed":
        files = [f"[Attached {a.get('mime')}: {a.get('filename') or 'file'}]"
                 for a in st.get("attachments") or [] if isinstance(a, dict)]
        out = "\n".join([str(st.get("output", "")), *files])
        if isinstance(st.get("time"), dict) and st["time"].get("compacted"):
            out = "[Old tool result content cleared]"
        elif len(out) > RESULT_LIMIT:
            out = out[:RESULT_LIMIT] + "\n[truncated]"
        return [call, f"[Tool result]: {out}"]
    if st.get("status") == "error":
        return [call, f"[Tool error]: {st.get('error')}"]
    return [call]


def _js_json(state: dict[str, Any]) -> str:
    """The call's input as ``JSON.stringify`` writes it: compact, keys in stored order, non-ASCII
    kept; no input at all reads ``undefined`` in OpenCode's template string."""
    if "input" not in state:
        return "undefined"
    return json.dumps(state["input"], separators=(",", ":"), ensure_ascii=False)
