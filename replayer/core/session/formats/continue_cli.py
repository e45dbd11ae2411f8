"""Continue sessions (``~/.continue/sessions/<id>.json``, the CLI ``cn`` and the IDE extensions) → chat messages.

One JSON document: ``sessionId``, ``title``, ``workspaceDirectory`` and ``history``, a list of
items ``{message, contextItems, toolCallStates?}``. Read as ``cn`` 1.5.47 sends them again
(its history-to-messages function in ``@continuedev/cli``'s bundle): each item's message in
order — a ``thinking`` message is sent as an assistant message — a user message's context items
put before its text as ``<context name="…">`` blocks, and after an assistant message with
``toolCallStates`` one tool message per call: its outputs' contents joined by newlines, or
"Tool cancelled" when it has none (the file keeps tool results there, not as messages).
A compaction (``/compact``, or automatic near the model's context length) replaces the whole
history with one assistant message holding the summary (``conversationSummary``); the history
sent from then on starts there, so what was before it is not in the file.
The system message is built at send time and filtered out of the file when it is saved
(``cn`` adds the working directory, the date and the git status): a capture supplies it and
the tools.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from replayer.core.errors import ImportFailed
from replayer.core.session.model import ImportStats, Message, Session, TextPart, ToolCall, Usage, image_part
from replayer.core.session.reader import blob_size
from replayer.core.session.registry import Head, Importer, doc_confidence, is_one_of, mostly, read_doc

FORMAT = "continue"
ROLES = {"user", "assistant", "thinking", "tool", "system"}
#: what ``cn`` sends for a call whose state holds no output
CANCELLED = "Tool cancelled"
#: the title of a session Continue has not named yet
UNTITLED = "Untitled Session"


def _is_item(item: Any) -> bool:
    return isinstance(item, dict) and isinstance(item.get("message"), dict) and \
        is_one_of(item["message"].get("role"), ROLES)


def detect(doc: Any) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("sessionId"), str) and mostly(doc.get("history"), _is_item)


def _content(content: Any, images: str, stats: ImportStats) -> str | list | None:
    """A message's content as ``cn`` sends it: a string, or text and image parts."""
    if content is None or isinstance(content, str):
        return content
    out: list = []
    for p in content if isinstance(content, list) else []:
        if not isinstance(p, dict):
            continue
        if p.get("type") == "text" and isinstance(p.get("text"), str):
            out.append(TextPart(text=p["text"]))
        elif p.get("type") == "imageUrl":
            url = p.get("imageUrl", {}).get("url") if isinstance(p.get("imageUrl"), dict) else None
            mime = url[5:].split(";", 1)[0] if isinstance(url, str) and url.startswith("data:") else None
            stats.image_placeholders += images != "keep"
            out.append(image_part(images, mime, blob_size(url)))
    return out


def _context(items: Any) -> str:
    """The context items ``cn`` puts before a user message's text."""
    return "".join(f'<context name="{c.get("name")}">\n{c.get("content")}\n</context>\n\n'
                   for c in items if isinstance(c, dict)) if isinstance(items, list) else ""


def _function(call: Any) -> dict:
    """A stored tool call's ``function`` object, or an empty one where the file holds none."""
    fn = call.get("function") if isinstance(call, dict) else None
    return fn if isinstance(fn, dict) else {}


def _tool_messages(states: Any) -> list[Message]:
    out: list[Message] = []
    for st in states if isinstance(states, list) else []:
        if not isinstance(st, dict):
            continue
        outputs = st.get("output") if isinstance(st.get("output"), list) else []
        text = "\n".join(str(o.get("content", "")) for o in outputs if isinstance(o, dict)) if outputs else CANCELLED
        name = _function(st.get("toolCall")).get("name")
        out.append(Message(role="tool", content=text, tool_call_id=str(st.get("toolCallId") or ""),
                           name=name if isinstance(name, str) else None))
    return out


def load(path: Path, doc: dict, images: str = "omit") -> Session:
    history = doc.get("history") or []
    stats = ImportStats(entries_total=len(history), branch_length=len(history))
    warnings: list[str] = []
    # a compaction replaces the history with its summary (an assistant message with
    # ``conversationSummary``); ``cn`` sends from the first such item on (``getHistoryForLLM``)
    cut = next((i for i, item in enumerate(history) if isinstance(item, dict)
                and isinstance(item.get("conversationSummary"), str)), None)
    if cut is not None:
        history = history[cut:]
        stats.compactions_total = stats.compactions_applied = 1
        stats.branch_length = len(history)
        warnings.append("Continue replaced the history before its compaction with the summary: the "
                        "requests sent before it (and the summarization request) are not in the file")
    messages: list[Message] = []
    system_prompt = None
    for item in history:
        if not _is_item(item):
            stats.count_unknown((item.get("message") or {}).get("role") if isinstance(item, dict) else type(item).__name__)
            continue
        m = item["message"]
        role = m["role"]
        content = _content(m.get("content"), images, stats)
        if role == "system":  # not saved by cn; an older IDE file may hold one
            if system_prompt is None and not messages:
                system_prompt = content if isinstance(content, str) else None
            continue
        if role == "user":
            ctx = _context(item.get("contextItems"))
            if ctx and isinstance(content, str):
                content = ctx + content
            messages.append(Message(role="user", content=content))
        elif role in ("assistant", "thinking"):
            calls = [ToolCall(id=str(tc.get("id") or ""), name=str(_function(tc).get("name") or ""),
                              arguments=str(_function(tc).get("arguments") or ""))
                     for tc in m.get("toolCalls") or [] if isinstance(tc, dict)] if role == "assistant" else []
            messages.append(Message(role="assistant", content=content, tool_calls=calls))
        elif role == "tool":
            messages.append(Message(role="tool", content=content, tool_call_id=m.get("toolCallId")))
        messages.extend(_tool_messages(item.get("toolCallStates")))
    if not messages:
        raise ImportFailed(f"{path}: a Continue session with no messages")
    u = doc.get("usage") if isinstance(doc.get("usage"), dict) else {}
    details = u.get("promptTokensDetails") if isinstance(u.get("promptTokensDetails"), dict) else {}
    model = next((m["message"]["usage"].get("model") for m in reversed(history) if _is_item(m)
                  and isinstance(m["message"].get("usage"), dict)
                  and isinstance(m["message"]["usage"].get("model"), str)), None)
    return Session(format=FORMAT, path=str(path), session_id=doc.get("sessionId"),
                   # "Untitled Session" is Continue's placeholder until it names one: the first prompt then
                   title=doc["title"] if isinstance(doc.get("title"), str) and doc["title"] != UNTITLED else None,
                   cwd=doc.get("workspaceDirectory") if isinstance(doc.get("workspaceDirectory"), str) else None,
                   provider="openai", model=model, messages=messages, system_prompt=system_prompt,
                   usage=Usage(input_tokens=u.get("promptTokens"), output_tokens=u.get("completionTokens"),
                               cache_read_tokens=details.get("cachedTokens")),
                   compacted_prefix=1 if cut is not None else 0,  # the summary answered no request of the file
                   stats=stats, warnings=warnings)


def detect_head(head: Head) -> float:
    return doc_confidence(head, detect, 0.9)


IMPORTER = Importer(FORMAT, detect_head, lambda path, o: load(path, read_doc(path, detect, "a Continue session"),
                                                             o.images))
