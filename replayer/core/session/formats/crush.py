"""Crush sessions (charmbracelet/crush): the SQLite ``crush.db`` in a project's ``.crush`` folder.

Read from Crush's source (``internal/db/migrations``, ``internal/message``, ``internal/agent``,
commit 37f36e9, after v0.90.0): tables ``sessions`` (``parent_session_id``, ``summary_message_id``,
``todos``), ``messages`` (``role``, ``parts``: a JSON list of ``{type, data}``, ``model``,
``provider``, ``is_summary_message``, ``created_at``) and ``files``. A session is sent again as
``sessionAgent.preparePrompt`` builds it: first, for a top-level session (not a subagent's), a
user message with the todo ``<system_reminder>``; from the summary message on when the session
has one (``getSessionMessages``: the summary is sent as a user message); messages with no parts
and assistant messages with no text, reasoning or call (cancelled) left out; a user message's
text trimmed, its text attachments and shell commands appended to it, its other attachments
images; tool results whose call is not in the session dropped, and a call without a result given
Crush's "interrupted" result. The system prompt and tools are not stored. Messages are ordered by
``created_at`` (seconds) and then by row, the order they were written in. The database is read
without writing beside it (``sqlite_ro``).
"""

from __future__ import annotations

import base64
import binascii
import sqlite3
from pathlib import Path
from typing import Any

import orjson

from replayer.core.errors import ImportFailed
from replayer.core.session import salvage
from replayer.core.session.model import (
    EarlierHistory, ImportStats, Message, Session, TextPart, ToolCall, image_part,
)
from replayer.core.session.registry import Head, Importer, LoadOptions
from replayer.core.session.sqlite_ro import open_readonly, table_names

FORMAT = "crush"
TABLES = frozenset({"sessions", "messages", "files"})
SQLITE_MAGIC = b"SQLite format 3\x00"
#: the first message of every top-level session's request (``preparePrompt``)
TODO_REMINDER = ("<system_reminder>This is a reminder that your todo list is currently empty. DO NOT mention this "
                 "to the user explicitly because they are already aware.\nIf you are working on tasks that would "
                 "benefit from a todo list please use the \"todos\" tool to create one.\nIf not, please feel free "
                 "to ignore. Again do not mention this message to the user.</system_reminder>")
#: the result Crush sends for a call that has none (``syntheticToolResultsForOrphanedCalls``)
INTERRUPTED = ("tool call was interrupted and did not produce a result, you may retry this call if the result "
               "is still needed")
#: a tool result's media that is not valid base64 (``mediaLoadFailedPlaceholder``)
MEDIA_FAILED = "[Image data could not be loaded]"
ATTACHED = "\n<system_info>The files below have been attached by the user, consider them in your response</system_info>\n"


def _parts(raw: Any) -> list[dict]:
    """The stored ``{type, data}`` parts, each a dict (others left out)."""
    try:
        parts = orjson.loads(raw) if isinstance(raw, (str, bytes)) and raw else []
    except orjson.JSONDecodeError:
        return []
    return [{"type": p.get("type"), **p["data"]} for p in parts if isinstance(p, dict)
            and isinstance(p.get("data"), dict)] if isinstance(parts, list) else []


def _of(parts: list[dict], kind: str) -> list[dict]:
    return [p for p in parts if p.get("type") == kind]


def _s(v: Any) -> str:
    return v if isinstance(v, str) else ""


def _bytes(p: dict) -> bytes:
    """A binary part's data (Go's ``[]byte``: base64 in the JSON)."""
    try:
        return base64.b64decode(_s(p.get("Data")), validate=True)
    except (binascii.Error, ValueError):
        return b""


def _user(parts: list[dict], images: str, stats: ImportStats) -> Message:
    """``Message.ToAIMessage`` for a user message: the first text trimmed, text attachments and
    shell commands after it, other attachments as images."""
    text = next((_s(p.get("text")) for p in _of(parts, "text")), "").strip()
    binary = _of(parts, "binary")
    texts = [p for p in binary if _s(p.get("MIMEType")).startswith("text/")]
    if texts:
        text += ATTACHED + "".join((f"<file path='{_s(p.get('Path'))}'>\n" if p.get("Path") else "<file>\n")
                                   + "\n" + _bytes(p).decode("utf-8", "replace") + "\n</file>\n" for p in texts)
    for sc in _of(parts, "shell_command"):
        code = sc.get("exit_code") if isinstance(sc.get("exit_code"), int) else 0
        shell = f"$ {_s(sc.get('command'))}\n{_s(sc.get('output'))}\n(exit code {code})"
        text = f"{text}\n\n{shell}" if text else shell
    content: list = [TextPart(text=text)] if text else []
    for p in binary:
        if not _s(p.get("MIMEType")).startswith("text/"):
            stats.image_placeholders += images != "keep"
            content.append(image_part(images, _s(p.get("MIMEType")) or None))
    if len(content) == 1 and isinstance(content[0], TextPart):
        return Message(role="user", content=text)
    return Message(role="user", content=content or "")


def _assistant(parts: list[dict]) -> Message | None:
    text = next((_s(p.get("text")) for p in _of(parts, "text")), "").strip()
    reasoning = next((_s(p.get("thinking")) for p in _of(parts, "reasoning")), "")
    calls = [ToolCall(id=_s(c.get("id")), name=_s(c.get("name")), arguments=_s(c.get("input")) or "{}")
             for c in _of(parts, "tool_call")]
    if not (text or reasoning or calls):
        return None  # cancelled before it returned anything: not sent
    return Message(role="assistant", content=text or None, reasoning=reasoning or None, tool_calls=calls)


def _results(parts: list[dict], known_calls: set[str], images: str, stats: ImportStats) -> list[Message]:
    out = []
    for r in _of(parts, "tool_result"):
        cid = _s(r.get("tool_call_id"))
        if cid not in known_calls:
            stats.orphan_results += 1  # dropped, as Crush drops it (an orphan would fail every request)
            continue
        if r.get("data") and not r.get("is_error"):
            try:
                base64.b64decode(_s(r["data"]), validate=True)
                stats.image_placeholders += images != "keep"
                content: Any = [image_part(images, _s(r.get("mime_type")) or None)]
            except (binascii.Error, ValueError):
                content = MEDIA_FAILED
        else:
            content = _s(r.get("content"))
        out.append(Message(role="tool", content=content, tool_call_id=cid, name=_s(r.get("name")) or None))
    return out


def _converted(rows: list[dict], images: str, stats: ImportStats) -> list[Message]:
    """Stored messages as ``preparePrompt`` sends them, the todo reminder aside."""
    parts = [_parts(r.get("parts")) for r in rows]
    calls = {_s(c.get("id")) for r, ps in zip(rows, parts) if r.get("role") == "assistant" for c in _of(ps, "tool_call")}
    answered = {_s(t.get("tool_call_id")) for r, ps in zip(rows, parts) if r.get("role") == "tool"
                for t in _of(ps, "tool_result")}
    out: list[Message] = []
    for r, ps in zip(rows, parts):
        role = r.get("role")
        if not ps:
            continue
        ts = _seconds(r.get("created_at"))
        if role == "user":
            out.append(_user(ps, images, stats).model_copy(update={"timestamp": ts}))
        elif role == "assistant":
            if (m := _assistant(ps)) is None:
                stats.dropped_turns += 1
                continue
            out.append(m.model_copy(update={"timestamp": ts}))
            for c in m.tool_calls:
                if c.id not in answered:
                    stats.synthetic_results += 1
                    out.append(Message(role="tool", content=INTERRUPTED, tool_call_id=c.id, name=c.name, timestamp=ts))
        elif role == "tool":
            out.extend(m.model_copy(update={"timestamp": ts}) for m in _results(ps, calls, images, stats))
        else:
            stats.count_unknown(role)
    return out


def _seconds(v: Any) -> float | None:
    """``created_at``: seconds as Crush writes it (``strftime('%s')``), milliseconds in an older file."""
    if not isinstance(v, (int, float)) or isinstance(v, bool) or v <= 0:
        return None
    return v / 1000 if v > 1e11 else float(v)


def load_db(path: Path, session_id: str | None = None, *, images: str = "omit") -> Session:
    try:
        with open_readonly(path) as con:
            con.row_factory = sqlite3.Row
            tables = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
            if not TABLES <= tables:
                raise ImportFailed(f"{path} is an SQLite file but not a Crush database")
            sessions = [dict(r) for r in con.execute("select * from sessions")]
            if not sessions:
                raise ImportFailed(f"{path} holds no Crush sessions")
            top = [s for s in sessions if not s.get("parent_session_id")] or sessions
            if session_id:
                chosen = next((s for s in sessions if s.get("id") == session_id), None)
                if chosen is None:
                    raise ImportFailed(f"no session {session_id!r} in {path}")
            else:
                chosen = max(top, key=lambda s: (s.get("updated_at") or 0, str(s.get("id"))))
            rows = [dict(r) for r in con.execute(
                "select rowid as row_id, * from messages where session_id=? order by created_at, rowid",
                (chosen["id"],))]
    except sqlite3.DatabaseError as exc:
        raise ImportFailed(f"cannot read {path}: {exc}") from None
    rows = [r for r in rows if salvage.admit(r, f"message {r.get('id')}") is not None]
    stats = ImportStats(entries_total=len(rows), branch_length=len(rows))
    warnings: list[str] = []
    if len(top) > 1 and not session_id:
        warnings.append(f"{len(top)} sessions in this database; replaying the newest ({chosen['id']})")
    children = sum(1 for s in sessions if s.get("parent_session_id") == chosen["id"])
    if children:
        warnings.append(f"{children} subagent session(s) of this session are in the database, not read as threads "
                        "(give --session-id to replay one)")
    earlier: list[EarlierHistory] = []
    summary = chosen.get("summary_message_id")
    cut = next((i for i, r in enumerate(rows) if summary and r.get("id") == summary), None)
    if cut is not None:  # Crush sends from its summary on, the summary as a user message
        stats.compactions_total = stats.compactions_applied = 1
        before = _converted(rows[:cut], images, ImportStats())
        if before:
            earlier.append(EarlierHistory(messages=_reminded(chosen, before)))
        rows = [*[{**rows[cut], "role": "user"}], *rows[cut + 1:]]
        stats.branch_length = len(rows)
        warnings.append("Crush's summarization request (its summary prompt) is not rebuilt")
    messages = _reminded(chosen, _converted(rows, images, stats))
    if stats.orphan_results:
        warnings.append(f"{stats.orphan_results} tool result(s) with no call in the session left out, as Crush "
                        "leaves them out")
    last = next((r for r in reversed(rows) if r.get("model")), {})
    return Session(format=FORMAT, path=str(path), session_id=chosen.get("id"),
                   title=chosen.get("title") if isinstance(chosen.get("title"), str) else None,
                   provider=last.get("provider"), model=last.get("model"), created=_seconds(chosen.get("created_at")),
                   updated=_seconds(chosen.get("updated_at")), messages=messages, system_prompt=None, tools=None,
                   stats=stats, warnings=warnings, earlier=earlier)


def _reminded(session: dict, messages: list[Message]) -> list[Message]:
    """The todo reminder Crush puts first in a top-level session's every request."""
    if session.get("parent_session_id") or not messages:
        return messages
    return [Message(role="user", content=TODO_REMINDER, timestamp=messages[0].timestamp), *messages]


def detect_head(head: Head) -> float:
    """An SQLite file with Crush's tables (Goose's ``sessions.db`` has no ``files`` table)."""
    if head.is_dir or head.bytes[:16] != SQLITE_MAGIC:
        return 0.0
    return 1.0 if TABLES <= table_names(head.path) else 0.0


def load(path: Path, options: LoadOptions) -> Session:
    return load_db(path, options.session_id, images=options.images)


IMPORTER = Importer(FORMAT, detect_head, load)
