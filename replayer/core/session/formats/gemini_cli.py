"""Gemini CLI chats (``~/.gemini/tmp/<project>/chats/session-<time>-<id>.jsonl``) → chat messages.

Read the way Gemini CLI 0.61 reads them back on ``--resume`` (``loadConversationRecord`` and
``convertSessionToClientHistory`` in ``@google/gemini-cli-core``): a JSONL file whose first line
is the metadata (``sessionId``, ``projectHash``), then one record per message keyed by ``id`` —
a later record with an id already seen replaces that message where it stands (a reply that
streamed in is rewritten as it grows), ``{"$rewindTo": id}`` drops that message and every one
after it (all of them when the id is unknown), ``{"$set": {"messages": […]}}`` replaces the whole
list. An older file is one JSON document with a ``messages`` list (``session-….json``).

Messages are rebuilt as Gemini CLI sends them, which the conformance suite checks against the
real CLI (tests/agents): ``user`` records (text, images; its environment context is a record of
its own, sent with the first prompt as one user turn: consecutive user records are merged),
``gemini`` replies (text and function calls — in the content, or in older files in ``toolCalls``
beside it; their thoughts are not sent back), and the results, which the CLI writes both into the
reply's ``toolCalls`` and as a user record of ``functionResponse`` parts (sent once; the
``toolCalls`` copy only where no record holds it). Call ids lose the ``<tool>__`` prefix the file
gives them. ``info``, ``error`` and ``warning`` records are the UI's, never sent, nor are slash
and ``?`` commands (the two replies around one go out as one model turn). The system prompt and
tools are not stored. Each process that wrote the file sent the history it held: a ``--resume``
writes the metadata line again and rewrites the history it loaded (each tool result twice), so
the processes before the last are ``Session.earlier`` and ``compacted_prefix`` marks where the
last one's own requests start. A subagent's chat is ``chats/<session id>/<its id>.jsonl``.

Gemini CLI speaks the Gemini API, not chat completions: against llama-server it runs through a
translating proxy, which is what the rebuilt chat body stands for (a note says so).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from replayer.core.errors import ImportFailed
from replayer.core.session.model import EarlierHistory, ImportStats, Message, Session, TextPart, ToolCall, Usage, image_part
from replayer.core.session.reader import blob_size, function_response_text, iso_to_s, json_args, read_records
from replayer.core.session.registry import Head, Importer, is_one_of, read_doc

FORMAT = "gemini-cli"
TYPES = {"user", "gemini", "info", "error", "warning"}
#: user entries that are Gemini CLI's commands, never sent to the model
_COMMANDS = ("/", "?")


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



def _call_id(call_id: Any, name: Any) -> str:
    """A call id as Gemini CLI sends it: the file keeps ``<tool>__<id>``, the wire ``<id>``
    (measured with 0.61.0 against the scripted model: calls and responses alike)."""
    cid, prefix = str(call_id or ""), f"{name}__"
    return cid[len(prefix):] if name and cid.startswith(prefix) else cid


def _response(fr: dict, ts: float | None, tc: dict | None = None) -> Message:
    name = fr.get("name") or (tc or {}).get("name") or ""
    return Message(role="tool", content=function_response_text(fr.get("response")), name=str(name), timestamp=ts,
                   tool_call_id=_call_id(fr.get("id") or (tc or {}).get("id"), name))


def _results(msg: dict, ts: float | None, answered: set[str]) -> list[Message]:
    """The results of a reply's ``toolCalls`` (a string, a list of parts, or one part), for the
    calls no user record of the file answers (an older file keeps them only here)."""
    out: list[Message] = []
    for tc in msg.get("toolCalls") or []:
        if not isinstance(tc, dict) or not tc.get("result") or _call_id(tc.get("id"), tc.get("name")) in answered:
            continue
        result = tc["result"]
        if isinstance(result, str):
            result = [{"functionResponse": {"id": tc.get("id"), "name": tc.get("name"), "response": {"output": result}}}]
        for p in _parts(result):
            if isinstance(p, dict) and isinstance(p.get("functionResponse"), dict):
                out.append(_response(p["functionResponse"], ts, tc))
            elif isinstance(p, dict) and isinstance(p.get("text"), str):
                out.append(Message(role="user", content=p["text"], timestamp=ts))
    return out


def _reply(msg: dict, ts: float | None, answered: set[str]) -> list[Message]:
    """A reply as Gemini CLI sends it back: its text and function calls; its thoughts are not
    sent again (only their signature, which a chat template does not read)."""
    parts = _parts(msg.get("content"))
    if any(isinstance(p, dict) and p.get("functionCall") for p in parts):  # the content is every part
        stored = [p.get("functionCall") for p in parts if isinstance(p, dict)]
    else:  # tool calls stored beside the text
        stored = msg.get("toolCalls") or []
    calls = [ToolCall(id=_call_id(c.get("id"), c.get("name")), name=str(c.get("name") or ""),
                      arguments=json_args(c.get("args") or {})) for c in stored if isinstance(c, dict)]
    text = _text(parts)
    out = [Message(role="assistant", content=text or None, tool_calls=calls, timestamp=ts)] if text or calls else []
    return out + _results(msg, ts, answered)


def _user(msg: dict, ts: float | None, images: str, stats: ImportStats) -> list[Message]:
    """A user record: its function responses as tool messages, its text and images as one user message."""
    parts = _parts(msg.get("content"))
    out = [_response(p["functionResponse"], ts) for p in parts
           if isinstance(p, dict) and isinstance(p.get("functionResponse"), dict)]
    rest = [p for p in parts if not (isinstance(p, dict) and "functionResponse" in p)]
    if rest:
        out.append(Message(role="user", content=_user_content(rest, images, stats), timestamp=ts))
    return out


def _merged(messages: list[Message]) -> list[Message]:
    """Consecutive messages of one role as one: Gemini CLI sends one ``Content`` of their parts
    (its environment context and the first prompt are two records, one user turn on the wire;
    two replies with a command between them that is not sent again, one model turn)."""
    out: list[Message] = []
    for m in messages:
        prev = out[-1] if out else None
        if m.role == "user" and prev is not None and prev.role == "user":
            out[-1] = prev.model_copy(update={"content": [*_as_parts(prev.content), *_as_parts(m.content)]})
        elif m.role == "assistant" and prev is not None and prev.role == "assistant" and not prev.tool_calls:
            text = "".join(x for x in (prev.content, m.content) if isinstance(x, str))
            out[-1] = prev.model_copy(update={"content": text or None, "tool_calls": m.tool_calls})
        else:
            out.append(m)
    return out


def _as_parts(content: Any) -> list:
    return [TextPart(text=content)] if isinstance(content, str) else list(content or [])


def _records(path: Path) -> tuple[dict, list[dict], ImportStats, list[str], list[tuple[list[dict], int]]]:
    """The metadata and the message list as Gemini CLI's loader leaves them, and for each process
    that wrote the file before the last (each writes its metadata line when it starts: a
    ``--resume``), the message list as it left it and how many of those messages it started from
    (the history it loaded, rewritten into the file at its start)."""
    if path.suffix == ".json" or _whole(path):
        doc = read_doc(path, detect_doc, "a Gemini CLI chat")
        msgs = [m for m in doc.get("messages") or [] if _is_message(m)]
        return doc, msgs, ImportStats(entries_total=len(doc.get("messages") or [])), [], []
    records, stats, warnings = read_records(path, "Gemini CLI")
    meta: dict = {}
    by_id: dict[str, dict] = {}  # insertion order kept when an id is written again, as a JS Map's
    processes: list[tuple[list[dict], int]] = []
    start: int | None = 0  # messages the current process loaded; None until its first own message
    for r in records:
        if isinstance(r.get("$rewindTo"), str):
            ids = list(by_id)
            cut = ids.index(r["$rewindTo"]) if r["$rewindTo"] in by_id else 0
            for i in ids[cut:]:
                del by_id[i]
        elif _is_message(r):
            if start is None:  # the first message this process writes: what it loaded is before it
                start = len(by_id)
            by_id[r["id"]] = r
        elif isinstance(r.get("$set"), dict):
            if isinstance(r["$set"].get("messages"), list):
                by_id = {m["id"]: m for m in r["$set"]["messages"] if _is_message(m)}
            meta.update({k: v for k, v in r["$set"].items() if k != "messages"})
        elif _is_metadata(r):
            if by_id:  # a process started on a file that holds messages: a resume
                processes.append((list(by_id.values()), start or 0))
                start = None
            meta.update({k: v for k, v in r.items() if k != "messages"})
            if isinstance(r.get("messages"), list):
                by_id.update({m["id"]: m for m in r["messages"] if _is_message(m)})
        else:
            stats.count_unknown(r.get("type"))
    if not _is_metadata(meta):
        raise ImportFailed(f"{path} has no Gemini CLI metadata line (sessionId, projectHash)")
    if processes and start is None:  # the last process wrote nothing of its own
        start = len(by_id)
    return meta, list(by_id.values()), stats, warnings, processes + [(list(by_id.values()), start or 0)]


def _whole(path: Path) -> bool:
    """A one-line legacy record (the whole chat on one line) in a ``.jsonl``-named file."""
    from replayer.core.session.reader import head_objects

    objs = head_objects(path, 2)
    return len(objs) == 1 and detect_doc(objs[0])


def _history(msgs: list[dict], images: str, stats: ImportStats) -> tuple[list[Message], Usage]:
    """The messages one process sent, from the records it held."""
    messages: list[Message] = []
    usage = Usage()
    answered = {_call_id(p["functionResponse"].get("id"), p["functionResponse"].get("name"))
                for m in msgs if m["type"] == "user" for p in _parts(m.get("content"))
                if isinstance(p, dict) and isinstance(p.get("functionResponse"), dict)}
    for m in msgs:
        ts = iso_to_s(m.get("timestamp"))
        if m["type"] == "user":
            text = _text(_parts(m.get("content"))).strip()
            if text.startswith(_COMMANDS):
                continue  # a slash or ? command: run by Gemini CLI, never sent
            messages.extend(_user(m, ts, images, stats))
        elif m["type"] == "gemini":
            messages.extend(_reply(m, ts, answered))
            tok = m.get("tokens")
            if isinstance(tok, dict):
                usage = Usage(input_tokens=tok.get("input"), output_tokens=tok.get("output"),
                              cache_read_tokens=tok.get("cached"), context_tokens=tok.get("input"))
    return _merged(messages), usage


def load(path: Path, images: str = "omit") -> Session:
    meta, msgs, stats, warnings, processes = _records(path)
    stats.lines = stats.lines or len(msgs)
    # each process sent the history it held: the last one's is the session's, those before it
    # are its earlier requests (a resumed process rewrites the history it loads, and sends it so)
    earlier: list[EarlierHistory] = []
    for held, loaded in processes[:-1]:
        history, _ = _history(held, images, ImportStats())  # the same images the session's own history counts
        earlier.append(EarlierHistory(messages=history, compacted_prefix=_sent_before(held, loaded, images)))
    messages, usage = _history(msgs, images, stats)
    kept = _sent_before(msgs, processes[-1][1], images) if earlier else 0
    if earlier:
        calls = [m.tool_call_id for m in messages if m.role == "tool"]
        warnings.append(f"Gemini CLI was resumed {len(earlier)} time(s): each process's requests are rebuilt from "
                        "the history it held" + ("; after a resume it sends each earlier tool result twice "
                                                 "(from the reply's tool calls and from the result's own record)"
                                                 if len(calls) != len(set(calls)) else ""))
    if not messages:
        raise ImportFailed(f"{path}: no Gemini CLI messages that are sent to the model")
    stats.branch_length = len(msgs)
    stats.entries_total = stats.entries_total or len(msgs)
    times = [t for t in (iso_to_s(m.get("timestamp")) for m in msgs) if t]
    warnings.append("Gemini CLI sends the Gemini API (generateContent): the rebuilt requests are the chat "
                    "bodies a translating proxy in front of llama-server sends")
    if meta.get("kind") == "subagent":
        warnings.append("a Gemini CLI subagent's chat: its own system prompt and tools are not stored (`replayer "
                        "agents capture gemini` runs a subagent too and keeps them)")
    return Session(format=FORMAT, format_version="subagent" if meta.get("kind") == "subagent" else None,
                   path=str(path), session_id=meta.get("sessionId"), provider="gemini",
                   cwd=_workspace(messages) or _first_directory(meta.get("directories")),
                   model=next((m.get("model") for m in reversed(msgs) if isinstance(m.get("model"), str)), None),
                   created=iso_to_s(meta.get("startTime")) or (min(times) if times else None),
                   updated=iso_to_s(meta.get("lastUpdated")) or (max(times) if times else None),
                   title=meta.get("summary") if isinstance(meta.get("summary"), str) else None,
                   messages=messages, earlier=earlier, compacted_prefix=kept, usage=usage, stats=stats,
                   warnings=warnings)


def _workspace(messages: list[Message]) -> str | None:
    """The project folder, from the environment context Gemini CLI sends with the first prompt
    ("- **Workspace Directories:**" then one folder a line); the file stores it nowhere else."""
    first = next((m for m in messages if m.role == "user"), None)
    m = _WORKSPACE.search(first.text() or "") if first is not None else None
    return m.group(1).strip() if m else None


def _first_directory(dirs: Any) -> str | None:
    """A subagent's folder, from the ``directories`` list its metadata line records."""
    return next((d for d in dirs if isinstance(d, str)), None) if isinstance(dirs, list) else None


_WORKSPACE = re.compile(r"<session_context>.*?Workspace Directories:\*\*\s*\n\s*- ([^\n]+)", re.S)


def _sent_before(held: list[dict], loaded: int, images: str) -> int:
    """How many of a process's messages it loaded (sent by the process before it): its turns start after them."""
    return len(_history(held[:loaded], images, ImportStats())[0]) if loaded else 0


def subagent_files(path: Path, session_id: str | None) -> list[Path]:
    """The chats of the subagents the chat at ``path`` started (its ``invoke_agent`` tool): Gemini
    CLI writes each as ``chats/<parent session id>/<subagent session id>.jsonl``, in name order."""
    if not session_id or path.parent.name != "chats" or "/" in session_id or session_id in (".", ".."):
        return []
    return sorted((path.parent / session_id).glob("*.jsonl"))


def detect_head(head: Head) -> float:
    if head.objs and detect(head.objs):
        return 0.95
    return 0.9 if head.doc is not None and detect_doc(head.doc) else 0.0


IMPORTER = Importer(FORMAT, detect_head, lambda path, o: load(path, o.images))
