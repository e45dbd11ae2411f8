"""Goose sessions (block/goose): the SQLite ``sessions.db`` in its data folder's ``sessions``.

Read from Goose's source (``crates/goose/src/session/session_manager.rs``, schema version 9:
tables ``schema_version``, ``sessions`` — ``name``, ``working_dir``, ``session_type``,
``provider_name`` — and ``messages``: ``role``, ``content_json`` (the message's content list,
``{"type": …}`` items of ``conversation/message.rs``), ``created_timestamp``, ``metadata_json``
(``agentVisible``); ``conversation/tool_result_serde.rs`` for a call's and a result's
``{status, value | error}``) and sent again as its OpenAI-compatible provider formats a request
(``providers/formats/openai.rs``, ``format_messages``): only the messages visible to the agent
(a compaction hides the old ones and adds its summary), content meant for the user only left out,
a message's texts joined by newlines, thinking not sent, each tool result a ``tool`` message (its
texts joined by spaces; an image a placeholder text and an image message after the results; an
error "The tool call returned the following error:"), reasoning as ``reasoning_content``. Not
rebuilt: a user text that names an image file Goose would load and attach (a note cannot tell),
tool names it sanitises. The system prompt and tools are not stored. Read without writing
beside the database (``sqlite_ro``).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import orjson

from replayer.core.errors import ImportFailed
from replayer.core.session import salvage
from replayer.core.session.model import ImportStats, Message, Session, TextPart, ToolCall, image_part
from replayer.core.session.registry import Head, Importer, LoadOptions
from replayer.core.session.sqlite_ro import open_readonly, table_names

FORMAT = "goose"
TABLES = frozenset({"schema_version", "sessions", "messages"})
SQLITE_MAGIC = b"SQLite format 3\x00"
IMAGE_IN_RESULT = "This tool result included an image that is uploaded in the next message."
RESULT_ERROR = "The tool call returned the following error:\n"


def _json(raw: Any) -> Any:
    try:
        return orjson.loads(raw) if isinstance(raw, (str, bytes)) and raw else None
    except orjson.JSONDecodeError:
        return None


def _for_agent(item: Any) -> bool:
    """Content meant for the model too (rmcp's ``annotations.audience``; none: everyone)."""
    if not isinstance(item, dict):
        return False
    ann = item.get("annotations")
    audience = ann.get("audience") if isinstance(ann, dict) else None
    return not isinstance(audience, list) or "assistant" in audience


def _s(v: Any) -> str:
    return v if isinstance(v, str) else ""


def _result(resp: dict, images: str, stats: ImportStats) -> tuple[Message, list[Message]]:
    """One ``toolResponse`` as the tool message Goose sends, and the image messages after it."""
    r = resp.get("toolResult") if isinstance(resp.get("toolResult"), dict) else {}
    cid = _s(resp.get("id"))
    if r.get("status") != "success":
        return Message(role="tool", content=RESULT_ERROR + _s(r.get("error")), tool_call_id=cid), []
    value = r.get("value")
    items = value.get("content") if isinstance(value, dict) else value  # CallToolResult, or a legacy list
    texts, after = [], []
    for c in items if isinstance(items, list) else []:
        if not _for_agent(c):
            continue
        kind = c.get("type")
        if kind == "image":
            texts.append(IMAGE_IN_RESULT)
            stats.image_placeholders += images != "keep"
            after.append(Message(role="user", content=[image_part(images, _s(c.get("mimeType")) or None)]))
        elif kind == "resource":
            res = c.get("resource") if isinstance(c.get("resource"), dict) else {}
            texts.append(_s(res.get("text")))
        else:
            texts.append(_s(c.get("text")) if kind == "text" else "")
    return Message(role="tool", content=" ".join(texts), tool_call_id=cid), after


def _call(req: dict) -> ToolCall | Message:
    """A ``toolRequest``'s call, or the tool message Goose sends for a call it could not parse."""
    tc = req.get("toolCall") if isinstance(req.get("toolCall"), dict) else {}
    v = tc.get("value") if isinstance(tc.get("value"), dict) else None
    if tc.get("status") != "success" or v is None:
        return Message(role="tool", content="Error: " + _s(tc.get("error")), tool_call_id=_s(req.get("id")))
    args = v.get("arguments")
    text = orjson.dumps(args).decode() if isinstance(args, dict) else "{}"
    return ToolCall(id=_s(req.get("id")), name=_s(v.get("name")), arguments=text)


def _messages(role: str, content: list, images: str, stats: ImportStats, ts: float | None) -> list[Message]:
    """``format_messages`` for one stored message: the message itself first (when it has content
    or calls), then the tool messages it makes, then their image messages."""
    texts, parts, calls, tools, after, reasoning = [], [], [], [], [], []
    for c in content:
        if not isinstance(c, dict) or not _for_agent(c) and c.get("type") in ("text", "image"):
            continue
        kind = c.get("type")
        if kind == "text" and _s(c.get("text")):
            texts.append(c["text"])
        elif kind == "image":
            stats.image_placeholders += images != "keep"
            parts.append(image_part(images, _s(c.get("mimeType")) or None) if role == "user" else
                         TextPart(text="[Image content removed - not supported in assistant messages]"))
        elif kind == "reasoning":
            reasoning.append(_s(c.get("text")))
        elif kind in ("toolRequest", "frontendToolRequest"):
            got = _call(c)
            (calls if isinstance(got, ToolCall) else tools).append(got)
        elif kind == "toolResponse":
            msg, imgs = _result(c, images, stats)
            tools.append(msg)
            after.extend(imgs)
        elif kind not in ("thinking", "redactedThinking", "systemNotification", "toolConfirmationRequest",
                          "actionRequired", "jsonRenderSpec"):
            stats.count_unknown(kind)
    out: list[Message] = []
    body: Any = ([TextPart(text=t) for t in texts] + parts) if parts else ("\n".join(texts) if texts else None)
    if body is not None or calls:
        out.append(Message(role="assistant" if role == "assistant" else "user", content=body, tool_calls=calls,
                           reasoning="".join(reasoning) or None, timestamp=ts))
    return out + [m.model_copy(update={"timestamp": ts}) for m in tools + after]


def _reordered(messages: list[Message]) -> list[Message]:
    """``reorder_tool_image_messages``: an image message after a tool result waits until the run
    of tool messages ends."""
    out: list[Message] = []
    deferred: list[Message] = []
    for m in messages:
        if m.role == "tool":
            out.append(m)
        elif m.role == "user" and not m.tool_calls and (out and out[-1].role == "tool" or deferred):
            deferred.append(m)
        else:
            out += deferred + [m]
            deferred = []
    return out + deferred


def load_db(path: Path, session_id: str | None = None, *, images: str = "omit") -> Session:
    try:
        with open_readonly(path) as con:
            con.row_factory = sqlite3.Row
            sessions = [dict(r) for r in con.execute("select * from sessions")]
            if not sessions:
                raise ImportFailed(f"{path} holds no Goose sessions")
            if session_id:
                chosen = next((s for s in sessions if s.get("id") == session_id), None)
                if chosen is None:
                    raise ImportFailed(f"no session {session_id!r} in {path}")
            else:
                chosen = max(sessions, key=lambda s: (str(s.get("updated_at") or ""), str(s.get("id"))))
            rows = [dict(r) for r in con.execute(
                "select * from messages where session_id=? order by created_timestamp, id", (chosen["id"],))]
    except sqlite3.DatabaseError as exc:
        raise ImportFailed(f"cannot read {path}: {exc}") from None
    rows = [r for r in rows if salvage.admit(r, f"message {r.get('id')}") is not None]
    stats = ImportStats(entries_total=len(rows))
    hidden = 0
    out: list[Message] = []
    for r in rows:
        meta = _json(r.get("metadata_json"))
        if isinstance(meta, dict) and meta.get("agentVisible") is False:
            hidden += 1  # compacted away (or a message for the user only): not sent
            continue
        content = _json(r.get("content_json"))
        ts = r.get("created_timestamp")
        out += _messages(str(r.get("role")), content if isinstance(content, list) else [], images, stats,
                         float(ts) if isinstance(ts, int) and ts > 0 else None)
    stats.branch_length = len(rows) - hidden
    warnings = []
    if len(sessions) > 1 and not session_id:
        warnings.append(f"{len(sessions)} sessions in this database; replaying the newest ({chosen['id']})")
    if hidden:
        warnings.append(f"{hidden} message(s) hidden from the agent (a compaction's history, or for the user "
                        "only) are not sent and not replayed")
    cfg = _json(chosen.get("model_config_json"))
    return Session(format=FORMAT, path=str(path), session_id=chosen.get("id"),
                   title=_s(chosen.get("name")) or _s(chosen.get("description")) or None,
                   cwd=_s(chosen.get("working_dir")) or None, provider=_s(chosen.get("provider_name")) or None,
                   model=_s(cfg.get("model_name")) or None if isinstance(cfg, dict) else None,
                   messages=_reordered(out), system_prompt=None, tools=None, stats=stats, warnings=warnings)


def detect_head(head: Head) -> float:
    """An SQLite file with Goose's tables (Crush's ``sessions``/``messages`` have no ``schema_version``)."""
    if head.is_dir or head.bytes[:16] != SQLITE_MAGIC:
        return 0.0
    return 1.0 if TABLES <= table_names(head.path) else 0.0


def load(path: Path, options: LoadOptions) -> Session:
    return load_db(path, options.session_id, images=options.images)


IMPORTER = Importer(FORMAT, detect_head, load)
