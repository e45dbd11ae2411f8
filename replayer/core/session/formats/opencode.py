"""OpenCode sessions: the SQLite ``opencode.db`` (1.2+) and the older JSON storage tree.

Both hold the same message/part objects. A message's parts are replayed in order; each
``step-start`` begins a new assistant chat message, so one stored assistant message can
become several (assistant tool_calls → tool results → assistant …). History starts at
the last completed compaction, in the order OpenCode sends it (``_sent_history``): its prompt
and summary, the recent turns it kept, what follows; the summary answered the summarization
request, not this history (``Session.compacted_prefix``). The history before each compaction
is kept too (``Session.earlier``): the requests sent then are turns, and each compaction's
summarization request (``opencode_summary``; its prompt and agent prompt from a capture). A
session with a ``revert`` (an undo point) loses what
follows it, as OpenCode's cleanup does before the next prompt. The database is read
without writing beside it (``sqlite_ro``).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from replayer.core.errors import ImportFailed
from replayer.core.session import salvage
from replayer.core.session.formats import opencode_summary
from replayer.core.session.formats.opencode_files import (
    admitted, loads_object, quiet_json, read_json, session_files, stored_files,
)
from replayer.core.session.model import (
    EarlierHistory, IMAGE_OMITTED, ImportStats, Message, Session, TextPart, ToolCall, Usage, image_part,
)
from replayer.core.session.reader import json_args, ms_to_s
from replayer.core.session.registry import Head, Importer, LoadOptions
from replayer.core.session.sqlite_ro import open_readonly, table_names

FORMAT = "opencode"


@dataclass(frozen=True)
class Fork:
    """OpenCode, or a fork keeping its tables (Kilo, ``kilo.py``): the format its sessions import
    as, and the text sent after a user message's stored parts (session row, message, parts)."""
    format: str
    label: str
    user_suffix: Callable[[dict, dict, list[dict]], str | None] | None = None


OPENCODE = Fork(FORMAT, "OpenCode")
#: a part's row time (``part.time_created``, ms) as the database holds it beside the part's data
ROW_TIME = "\x00row_time"
SQLITE_MAGIC = b"SQLite format 3\x00"


def is_sqlite(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(16) == SQLITE_MAGIC
    except OSError:
        return False


def storage_root(path: Path) -> Path | None:
    """The ``storage`` folder for a storage dir, a data dir, or a session JSON file in it."""
    candidates = [path, path / "storage"] + list(path.parents)
    for c in candidates:
        if c.is_dir() and (c / "session").is_dir() and (c / "message").is_dir():
            return c
    return None


TABLES = frozenset({"session", "message", "part"})  # an OpenCode database's (and a fork's)


def _sessions(con: sqlite3.Connection, path: Path, fork: Fork = OPENCODE) -> list[dict[str, Any]]:
    con.row_factory = sqlite3.Row
    tables = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
    if not TABLES <= tables:
        raise ImportFailed(f"{path} is an SQLite file but not a database of {fork.label}")
    rows = [dict(r) for r in con.execute("select * from session")]
    con.row_factory = None
    return rows


def children(path: Path, session_id: str) -> list[str]:
    """The ids of the sessions started from ``session_id`` (OpenCode's task tool: a child session
    with ``parentID``), their own children too, in the order they were created."""
    if path.is_dir() or not is_sqlite(path):
        root = storage_root(path)
        infos = [] if root is None else [quiet_json(f) for f in session_files(root)]
        rows = [(i.get("id"), i.get("parentID"), t.get("created") if isinstance(t := i.get("time"), dict) else None)
                for i in infos]
    else:
        try:
            with open_readonly(path) as con:
                rows = [(r["id"], r.get("parent_id"), r.get("time_created")) for r in _sessions(con, path)]
        except sqlite3.DatabaseError as exc:
            raise ImportFailed(f"cannot read {path}: {exc}") from None
    created = {i: t if isinstance(t, (int, float)) and not isinstance(t, bool) else 0
               for i, _, t in rows if isinstance(i, str)}
    links = [(i, p) for i, p, _ in rows if isinstance(i, str) and isinstance(p, str)]
    out: set[str] = set()
    parents = {session_id}
    while parents:  # each generation's children, until none is new (a loop ends too)
        parents = {i for i, p in links if p in parents and i not in out and i != session_id}
        out |= parents
    return sorted(out, key=lambda i: (created[i], i))


def load_db(path: Path, session_id: str | None = None, *, images: str = "omit", fork: Fork = OPENCODE) -> Session:
    try:
        with open_readonly(path) as con:
            sessions = _sessions(con, path, fork)
            if not sessions:
                raise ImportFailed(f"{path} holds no {fork.label} sessions")
            top = [s for s in sessions if not s.get("parent_id")] or sessions
            if session_id:
                chosen = next((s for s in sessions if s["id"] == session_id), None)
                if chosen is None:
                    raise ImportFailed(f"no session {session_id!r} in {path}")
            else:
                chosen = max(top, key=lambda s: (s.get("time_updated") or 0, s["id"]))
            msgs = con.execute(
                "select id, time_created, data from message where session_id=? order by time_created, id",
                (chosen["id"],)).fetchall()
            parts = con.execute(
                "select message_id, id, data, time_created from part where session_id=? order by message_id, id",
                (chosen["id"],)).fetchall()
    except sqlite3.DatabaseError as exc:
        raise ImportFailed(f"cannot read {path}: {exc}") from None
    by_msg: dict[str, list[dict]] = {}
    for mid, pid, data, created in parts:  # each row named, to be left out by name if a field cannot be read
        row = {"id": pid} | ({ROW_TIME: created} if isinstance(created, int) and created > 0 else {})
        if (part := salvage.admit(loads_object(data) | row, f"part {pid}")) is not None:
            by_msg.setdefault(mid, []).append(part)
    messages = [m for mid, _, data in msgs if (m := salvage.admit(loads_object(data) | {"id": mid}, f"message {mid}"))]
    warnings = []
    if len(top) > 1 and not session_id:
        warnings.append(f"{len(top)} sessions in this database; replaying the newest ({chosen['id']})")
    suffix = (lambda m, ps: fork.user_suffix(chosen, m, ps)) if fork.user_suffix else None
    return _build(path, messages, by_msg, chosen.get("id"), chosen.get("title"), chosen.get("directory"),
                  chosen.get("version"), ms_to_s(chosen.get("time_created")),
                  ms_to_s(chosen.get("time_updated")), warnings, images, loads_object(chosen.get("revert")),
                  fmt=fork.format, suffix=suffix)


def load_storage(path: Path, session_id: str | None = None, *, images: str = "omit") -> Session:
    root = storage_root(path)
    if root is None:
        raise ImportFailed(f"{path} is not inside an OpenCode storage folder")
    if session_id is not None:
        info = next((i for f in session_files(root) if (i := quiet_json(f)).get("id") == session_id), None)
        if info is None:
            raise ImportFailed(f"no session {session_id!r} in {root}")
    elif path.is_file():
        info = read_json(path)
    else:
        files = sorted(session_files(root), key=lambda p: p.stat().st_mtime)
        if not files:
            raise ImportFailed(f"{root} holds no sessions")
        info = read_json(files[-1])
        if info.get("parentID"):  # a subagent's session: the newest top-level one is the conversation
            info = next((i for f in reversed(files[:-1]) if (i := quiet_json(f)) and not i.get("parentID")), info)
    sid = info.get("id")
    messages = admitted(root, stored_files(root, "message", sid, "session"))
    messages.sort(key=lambda m: ((m.get("time") or {}).get("created") or 0, str(m.get("id", ""))))
    by_msg = {}
    for m in messages:
        by_msg[m.get("id")] = admitted(root, stored_files(root, "part", m.get("id"), "message"))
    t = info.get("time") or {}
    revert = info.get("revert") if isinstance(info.get("revert"), dict) else {}
    return _build(path, messages, by_msg, sid, info.get("title"), info.get("directory"), info.get("version"),
                  ms_to_s(t.get("created")), ms_to_s(t.get("updated")), [], images, revert)


def _revert(messages: list[dict], parts: dict[str, list[dict]], revert: dict, warnings: list[str]) -> list[dict]:
    """What survives an undo point (OpenCode's ``SessionRevert.cleanup``): messages whose id
    sorts before ``revert.messageID``; with a ``partID``, that message too, cut before the
    part. Ids sort in creation order."""
    mid, pid = revert.get("messageID"), revert.get("partID")
    if not isinstance(mid, str):
        return messages
    kept = []
    for m in messages:
        m_id = str(m.get("id", ""))
        if m_id < mid:
            kept.append(m)
        elif m_id == mid and pid:
            ps = parts.get(m_id, [])
            cut = next((i for i, p in enumerate(ps) if p.get("id") == pid), len(ps))
            parts[m_id] = ps[:cut]
            kept.append(m)
    if len(kept) < len(messages):
        warnings.append(f"the session was reverted (undo): {len(messages) - len(kept)} later message(s) are "
                        "left out, as OpenCode drops them before the next prompt")
    return kept


def _build(path: Path, messages: list[dict], parts: dict[str, list[dict]], sid, title, cwd, version,
           created, updated, warnings: list[str], images: str, revert: dict | None = None, *, fmt: str = FORMAT,
           suffix: Callable[[dict, list[dict]], str | None] | None = None) -> Session:
    """Both storages' common path: undo, compaction, then each stored message as chat messages."""
    stats = ImportStats(entries_total=len(messages))
    if revert:
        messages = _revert(messages, parts, revert, warnings)
    if not messages:
        raise ImportFailed(f"session {sid} has no messages")
    done = _completed_compactions(messages, parts, stats)
    acc = _Acc()
    earlier = []
    for k, at in enumerate(done):  # the history as OpenCode sent it just before each compaction
        before, left = _sent_history(messages[:at], parts, done[:k])
        kept = _converted(before[:left], parts, images, acc, suffix)
        earlier.append(EarlierHistory(messages=kept + _converted(before[left:], parts, images, acc, suffix),
                                      compacted_prefix=len(kept),
                                      # a fork's summarization prompt and serialization are its own
                                      # (Kilo's "anchored summary"), not checked: not rebuilt, noted
                                      summarization=opencode_summary.summarization(messages, parts, at, done[:k],
                                                                                   warnings)
                                      if fmt == FORMAT else None))
    sent, left = _sent_history(messages, parts, done)
    acc = _Acc()  # the session's own counts: from what it sends now
    prefix = _converted(sent[:left], parts, images, acc, suffix)
    out = prefix + _converted(sent[left:], parts, images, acc, suffix)
    stats.dropped_turns = acc.dropped
    if done:
        stats.compactions_applied = 1
    stats.branch_length = len(sent)
    return Session(format=fmt, agent_version=version, path=str(path), session_id=sid, title=title, cwd=cwd,
                   provider=acc.provider, model=acc.model, created=created, updated=updated, messages=out,
                   system_prompt=None, tools=None, usage=acc.usage, stats=stats, warnings=warnings,
                   compacted_prefix=len(prefix) if done else 0, earlier=earlier)


class _Acc:
    """What the conversion of stored messages gathers beside them: the last model, provider and
    token counts, and the responses left out for an error."""

    def __init__(self) -> None:
        self.model: str | None = None
        self.provider: str | None = None
        self.usage = Usage()
        self.dropped = 0


def _converted(stored: list[dict], parts: dict[str, list[dict]], images: str, acc: _Acc,
               suffix: Callable[[dict, list[dict]], str | None] | None = None) -> list[Message]:
    """Stored messages as the chat messages OpenCode sends for them, in order."""
    out: list[Message] = []
    for m in stored:
        ps = parts.get(m.get("id"), [])
        ts = ms_to_s((m.get("time") or {}).get("created"))
        if m.get("role") == "user":
            if (msg := _user(ps, ts, images, suffix(m, ps) if suffix else None)) is not None:
                out.append(msg)
            continue
        if m.get("role") != "assistant":
            continue
        err = m.get("error")
        if err and not (isinstance(err, dict) and err.get("name") == "MessageAbortedError" and ps):
            acc.dropped += 1
            continue
        acc.model, acc.provider = m.get("modelID") or acc.model, m.get("providerID") or acc.provider
        acc.usage = _usage(m.get("tokens")) or acc.usage
        for step in _steps(ps):
            out.extend(_step_messages(step, _step_time(step) or ts))
    return out


def _completed_compactions(messages: list[dict], parts: dict[str, list[dict]], stats: ImportStats) -> list[int]:
    """The indexes of the compaction requests (a user message with a ``compaction`` part) whose
    summary was answered without error, in order; every compaction is counted."""
    completed_summaries = {m.get("parentID") for m in messages if m.get("role") == "assistant"
                           and m.get("summary") is True and not m.get("error")
                           and (m.get("time") or {}).get("completed")}
    out = []
    for i, m in enumerate(messages):
        if m.get("role") == "user" and any(p.get("type") == "compaction" for p in parts.get(m.get("id"), [])):
            stats.compactions_total += 1
            if m.get("id") in completed_summaries:
                out.append(i)
    return out


def _sent_history(messages: list[dict], parts: dict[str, list[dict]], done: list[int]) -> tuple[list[dict], int]:
    """The stored messages OpenCode sends from the latest completed compaction on, in the order it
    sends them, and how many of them that compaction left (``MessageV2.filterCompacted``, 1.18.33):
    the compaction's own request ("What did we do so far?") and its summary, then, when the
    compaction part names a ``tail_start_id``, the recent turns it kept (from that message to the
    compaction), then what came after the summary. A response among those it left answered the
    summarization request or the history before the compaction, never this history."""
    if not done:
        return messages, 0
    w = done[-1]
    wid = messages[w].get("id")
    j = next((i for i in range(w + 1, len(messages)) if messages[i].get("role") == "assistant"
              and messages[i].get("summary") is True and messages[i].get("parentID") == wid), None)
    tail = next((p.get("tail_start_id") for p in parts.get(wid, []) if p.get("type") == "compaction"
                 and isinstance(p.get("tail_start_id"), str)), None)
    v = next((i for i in range(w) if messages[i].get("id") == tail), None) if tail else None
    if j is None:
        return messages[w:], 0
    if v is None:
        return messages[w:], j + 1 - w
    kept = messages[w:j + 1] + messages[v:w]
    return kept + messages[j + 1:], len(kept)


def _user(ps: list[dict], ts: float | None, images: str, suffix: str | None = None) -> Message | None:
    """A user message's parts as OpenCode sends them: compaction and subtask parts become their
    fixed prompts, files that are not text become images (or the omitted-image text), then a fork's ``suffix``."""
    content: list = []
    for p in ps:
        t = p.get("type")
        mime = str(p.get("mime", ""))
        if t == "text" and not p.get("ignored"):
            content.append(TextPart(text=p.get("text", "")))
        elif t == "compaction":
            content.append(TextPart(text="What did we do so far?"))
        elif t == "subtask":
            content.append(TextPart(text="The following tool was executed by the user"))
        elif t == "file" and not mime.startswith("text/"):
            content.append(image_part(images, mime) if mime.startswith("image/") else TextPart(text=IMAGE_OMITTED))
    if not content:
        return None
    if suffix:
        content.append(TextPart(text=suffix))
    one_text = len(content) == 1 and isinstance(content[0], TextPart)
    return Message(role="user", content=content[0].text if one_text else content, timestamp=ts)


def _usage(tk: Any) -> Usage | None:
    """The assistant message's token counts, when it has any."""
    if not tk or not isinstance(tk, dict):
        return None
    cache = tk.get("cache") or {}
    return Usage(input_tokens=tk.get("input"), output_tokens=tk.get("output"), cache_read_tokens=cache.get("read"),
                 context_tokens=(tk.get("input") or 0) + (cache.get("read") or 0) or None)


def _steps(ps: list[dict]) -> list[list[dict]]:
    """One stored assistant message's parts cut at each ``step-start``: one chat turn a step."""
    steps: list[list[dict]] = [[]]
    for p in ps:
        if p.get("type") == "step-start" and steps[-1]:
            steps.append([])
        steps[-1].append(p)
    return steps


def _step_time(step: list[dict]) -> float | None:
    """When a step began (its request was sent): its first part's row time in the database, else
    the start time its first timed part records (a text, reasoning or tool part)."""
    for p in step:
        t = p.get(ROW_TIME)
        if not isinstance(t, int):
            st = p.get("state")
            times = (st.get("time") if isinstance(st, dict) else None) if p.get("type") == "tool" else p.get("time")
            t = times.get("start") if isinstance(times, dict) else None
        if isinstance(t, (int, float)) and not isinstance(t, bool) and t > 0:
            return ms_to_s(t)
    return None


def _step_messages(step: list[dict], ts: float | None) -> list[Message]:
    """A step's assistant message (text, reasoning, tool calls) followed by its tool results."""
    texts, reasoning, calls, results = [], [], [], []
    for p in step:
        t = p.get("type")
        if t == "text" and not p.get("ignored") and p.get("text"):
            texts.append(p["text"])
        elif t == "reasoning" and p.get("text"):
            reasoning.append(p["text"])
        elif t == "tool":
            st = p.get("state") or {}
            cid = str(p.get("callID") or p.get("id"))
            calls.append(ToolCall(id=cid, name=p.get("tool", ""), arguments=json_args(st.get("input", {}))))
            results.append(Message(role="tool", content=_tool_result(st), tool_call_id=cid, name=p.get("tool"),
                                   timestamp=ts))
    if not (texts or calls):
        return []
    return [Message(role="assistant", content="".join(texts) or None, reasoning="\n".join(reasoning) or None,
                    tool_calls=calls, timestamp=ts), *results]


def _tool_result(st: dict) -> str:
    """What OpenCode sends for a tool part in each state (a compacted output is cleared)."""
    status = st.get("status")
    if status == "completed":
        return "[Old tool result content cleared]" if (st.get("time") or {}).get("compacted") \
            else str(st.get("output", ""))
    if status == "error":
        return str(st.get("error", "error"))
    return "[Tool execution was interrupted]"


def detect_head(head: Head) -> float:
    """A storage folder, a database, or one session file inside a storage folder."""
    if head.is_dir:
        return 1.0 if storage_root(head.path) is not None else 0.0
    if head.bytes[:16] == SQLITE_MAGIC:  # not another agent's tables; Kilo's importer is surer of its own
        tables = table_names(head.path)
        return 0.0 if not TABLES <= tables else 0.5 if any(t.startswith("kilo_") for t in tables) else 1.0
    doc = head.doc
    if isinstance(doc, dict) and str(doc.get("id", "")).startswith("ses_") and storage_root(head.path.parent):
        return 1.0
    return 0.0


def load_any(path: Path, options: LoadOptions) -> Session:
    if path.is_dir() or not is_sqlite(path):
        return load_storage(path, options.session_id, images=options.images)
    return load_db(path, options.session_id, images=options.images)


IMPORTER = Importer(FORMAT, detect_head, load_any)
