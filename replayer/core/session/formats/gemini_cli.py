"""Gemini CLI chats (``~/.gemini/tmp/<project>/chats/session-<time>-<id>.jsonl``) → chat messages.

Read the way Gemini CLI 0.61 reads them back on ``--resume`` (``loadConversationRecord`` and
``convertSessionToClientHistory`` in ``@google/gemini-cli-core``): a JSONL file whose first line
is the metadata (``sessionId``, ``projectHash``), then one record per message keyed by ``id`` —
a later record with an id already seen replaces that message where it stands (a reply that
streamed in is rewritten as it grows), ``{"$rewindTo": id}`` drops that message and every one
after it (all of them when the id is unknown), ``{"$set": {"messages": […]}}`` replaces the whole
list. An older file is one JSON document with a ``messages`` list (``session-….json``).

Messages are Gemini ``Content`` parts: ``user`` (text, inline images), ``gemini`` (text,
``thought`` parts, ``functionCall`` parts — or, in older files, ``thoughts`` and ``toolCalls``
beside the text), and the results of a reply's ``toolCalls`` (their ``result`` parts), which
Gemini CLI sends as the next user turn. ``info``, ``error`` and ``warning`` records are the
UI's, never sent; nor are user entries that are slash or ``?`` commands or Gemini CLI's own
``<session_context>`` / ``<hook_context>`` blocks. The system prompt and tools are not stored.

Gemini CLI speaks the Gemini API, not chat completions: against llama-server it runs through a
translating proxy, which is what the rebuilt chat body stands for (a note says so).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from replayer.core.errors import ImportFailed
from replayer.core.session.model import ImportStats, Message, Session, TextPart, ToolCall, Usage, image_part
from replayer.core.session.reader import blob_size, iso_to_s, json_args, read_records
from replayer.core.session.registry import Head, Importer, is_one_of, read_doc

FORMAT = "gemini-cli"
TYPES = {"user", "gemini", "info", "error", "warning"}
#: user entries Gemini CLI does not send again on resume (``isIgnoredUserContent``)
_IGNORED_PREFIXES = ("/", "?", "<session_context>", "<hook_context>")


def _is_metadata(o: Any) -> bool:
    return isinstance(o, dict) and isinstance(o.get("sessionId"), str) and isinstance(o.get("projectHash"), str)


def _is_message(o: Any) -> bool:
    return isinstance(o, dict) and isinstance(o.get("id"), str) and is_one_of(o.get("type"), TYPES)


def detect_doc(doc: Any) -> bool:
    """An older whole-document chat: the metadata with a ``messages`` list."""
    return _is_metadata(doc) and isinstance(doc.get("messages"), list)


def detect(objs: list[dict[str, Any]]) -> bool:
    """A JSONL chat: its metadata line first, then message / ``$rewindTo`` / ``$set`` records."""
    return bool(objs) and _is_metadata(objs[0]) and all(
        _is_message(o) or "$rewindTo" in o or "$set" in o or _is_metadata(o) for o in objs[1:])


def _parts(content: Any) -> list[Any]:
    """A ``PartListUnion`` as a list of parts (a string is one text part)."""
    if isinstance(content, str):
        return [{"text": content}]
    if isinstance(content, list):
        return [{"text": p} if isinstance(p, str) else p for p in content]
    return [content] if isinstance(content, dict) else []


def _text(parts: list[Any]) -> str:
    return "".join(p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)
                   and not p.get("thought"))


def _user_content(parts: list[Any], images: str, stats: ImportStats) -> str | list:
    """A user turn's text, or its parts when it holds an image (a placeholder, never the bytes)."""
    out: list = []
    for p in parts:
        if not isinstance(p, dict):
            continue
        if isinstance(p.get("text"), str):
            out.append(TextPart(text=p["text"]))
        elif isinstance(p.get("inlineData"), dict):
            stats.image_placeholders += images != "keep"
            d = p["inlineData"]
            out.append(image_part(images, d.get("mimeType") if isinstance(d.get("mimeType"), str) else None,
                                  blob_size(d.get("data"))))
    if all(isinstance(x, TextPart) for x in out):
        return "".join(x.text for x in out)
    return out


def _response_text(resp: Any) -> str:
    if isinstance(resp, dict):
        for k in ("output", "content", "result", "error"):
            if isinstance(resp.get(k), str):
                return resp[k]
    return json_args(resp) if resp is not None else ""


def _results(msg: dict, ts: float | None) -> list[Message]:
    """The next user turn Gemini CLI sends after a reply with ``toolCalls``: each call's result
    (a string, a list of parts, or one part), as tool messages."""
    out: list[Message] = []
    for tc in msg.get("toolCalls") or []:
        if not isinstance(tc, dict) or not tc.get("result"):
            continue
        result = tc["result"]
        if isinstance(result, str):
            result = [{"functionResponse": {"id": tc.get("id"), "name": tc.get("name"), "response": {"output": result}}}]
        for p in _parts(result):
            if not isinstance(p, dict):
                continue
            fr = p.get("functionResponse")
            if isinstance(fr, dict):
                out.append(Message(role="tool", content=_response_text(fr.get("response")),
                                   tool_call_id=str(fr.get("id") or tc.get("id") or ""),
                                   name=str(fr.get("name") or tc.get("name") or ""), timestamp=ts))
            elif isinstance(p.get("text"), str):
                out.append(Message(role="user", content=p["text"], timestamp=ts))
    return out


def _reply(msg: dict, ts: float | None) -> list[Message]:
    parts = _parts(msg.get("content"))
    modern = any(isinstance(p, dict) and (p.get("functionCall") or p.get("thought")) for p in parts)
    thoughts: list[str] = []
    calls: list[ToolCall] = []
    if modern:  # the content is every part of the reply
        thoughts = [p["text"] for p in parts if isinstance(p, dict) and p.get("thought") and isinstance(p.get("text"), str)]
        calls = [ToolCall(id=str(fc.get("id") or ""), name=str(fc.get("name") or ""), arguments=json_args(fc.get("args") or {}))
                 for fc in (p.get("functionCall") for p in parts if isinstance(p, dict)) if isinstance(fc, dict)]
    else:  # older files: thoughts and tool calls stored beside the text
        for t in msg.get("thoughts") or []:
            if isinstance(t, dict) and isinstance(t.get("description"), str):
                thoughts.append(f"**{t['subject']}** {t['description']}" if t.get("subject") else t["description"])
        calls = [ToolCall(id=str(tc.get("id") or ""), name=str(tc.get("name") or ""), arguments=json_args(tc.get("args") or {}))
                 for tc in msg.get("toolCalls") or [] if isinstance(tc, dict)]
    text = _text(parts)
    out: list[Message] = []
    if text or calls or thoughts:
        out.append(Message(role="assistant", content=text or None, reasoning="\n".join(thoughts) or None,
                           tool_calls=calls, timestamp=ts))
    return out + _results(msg, ts)


def _records(path: Path) -> tuple[dict, list[dict], ImportStats, list[str]]:
    """The metadata and the message list as Gemini CLI's loader leaves them."""
    if path.suffix == ".json" or _whole(path):
        doc = read_doc(path, detect_doc, "a Gemini CLI chat")
        msgs = [m for m in doc.get("messages") or [] if _is_message(m)]
        return doc, msgs, ImportStats(entries_total=len(doc.get("messages") or [])), []
    records, stats, warnings = read_records(path, "Gemini CLI")
    meta: dict = {}
    by_id: dict[str, dict] = {}  # insertion order kept when an id is written again, as a JS Map's
    for r in records:
        if isinstance(r.get("$rewindTo"), str):
            ids = list(by_id)
            cut = ids.index(r["$rewindTo"]) if r["$rewindTo"] in by_id else 0
            for i in ids[cut:]:
                del by_id[i]
        elif _is_message(r):
            by_id[r["id"]] = r
        elif isinstance(r.get("$set"), dict):
            if isinstance(r["$set"].get("messages"), list):
                by_id = {m["id"]: m for m in r["$set"]["messages"] if _is_message(m)}
            meta.update({k: v for k, v in r["$set"].items() if k != "messages"})
        elif _is_metadata(r):
            meta.update({k: v for k, v in r.items() if k != "messages"})
            if isinstance(r.get("messages"), list):
                by_id.update({m["id"]: m for m in r["messages"] if _is_message(m)})
        else:
            stats.count_unknown(r.get("type"))
    if not _is_metadata(meta):
        raise ImportFailed(f"{path} has no Gemini CLI metadata line (sessionId, projectHash)")
    return meta, list(by_id.values()), stats, warnings


def _whole(path: Path) -> bool:
    """A one-line legacy record (the whole chat on one line) in a ``.jsonl``-named file."""
    from replayer.core.session.reader import head_objects

    objs = head_objects(path, 2)
    return len(objs) == 1 and detect_doc(objs[0])


def load(path: Path, images: str = "omit") -> Session:
    meta, msgs, stats, warnings = _records(path)
    stats.lines = stats.lines or len(msgs)
    messages: list[Message] = []
    usage = Usage()
    for m in msgs:
        ts = iso_to_s(m.get("timestamp"))
        if m["type"] == "user":
            parts = _parts(m.get("content"))
            text = "".join(p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str))
            if not text.strip() or text.strip().startswith(_IGNORED_PREFIXES):
                continue  # a command or Gemini CLI's own context block: never sent
            messages.append(Message(role="user", content=_user_content(parts, images, stats), timestamp=ts))
        elif m["type"] == "gemini":
            messages.extend(_reply(m, ts))
            tok = m.get("tokens")
            if isinstance(tok, dict):
                usage = Usage(input_tokens=tok.get("input"), output_tokens=tok.get("output"),
                              cache_read_tokens=tok.get("cached"), context_tokens=tok.get("input"))
    if not messages:
        raise ImportFailed(f"{path}: no Gemini CLI messages that are sent to the model")
    stats.branch_length = len(msgs)
    stats.entries_total = stats.entries_total or len(msgs)
    times = [t for t in (iso_to_s(m.get("timestamp")) for m in msgs) if t]
    warnings.append("Gemini CLI sends the Gemini API (generateContent): the rebuilt requests are the chat "
                    "bodies a translating proxy in front of llama-server sends")
    if meta.get("kind") == "subagent":
        warnings.append("a Gemini CLI subagent's chat: its own system prompt and tools are not stored")
    return Session(format=FORMAT, format_version="subagent" if meta.get("kind") == "subagent" else None,
                   path=str(path), session_id=meta.get("sessionId"), provider="gemini",
                   model=next((m.get("model") for m in reversed(msgs) if isinstance(m.get("model"), str)), None),
                   created=iso_to_s(meta.get("startTime")) or (min(times) if times else None),
                   updated=iso_to_s(meta.get("lastUpdated")) or (max(times) if times else None),
                   title=meta.get("summary") if isinstance(meta.get("summary"), str) else None,
                   messages=messages, usage=usage, stats=stats, warnings=warnings)


def detect_head(head: Head) -> float:
    if head.objs and detect(head.objs):
        return 0.95
    return 0.9 if head.doc is not None and detect_doc(head.doc) else 0.0


IMPORTER = Importer(FORMAT, detect_head, lambda path, o: load(path, o.images))
