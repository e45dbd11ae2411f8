"""pi coding agent sessions (v1, v2, v3) → the messages pi sends on ``--resume``.

Follows pi's own resume path (``spec/session-formats.md`` §1.4): migrate v1/v2 in memory,
take the leaf as the last entry in file order, walk ``parentId`` to the root, apply the
latest compaction, turn entries into agent messages, then pi-ai's provider-independent
transform and its openai-completions adapter (what llama-server receives).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator

from replayer.core.errors import ImportFailed
from replayer.core.session.branch import path_to_root
from replayer.core.session.model import (
    EarlierHistory, ImagePart, ImportStats, Message, Session, TextPart, ToolCall, Usage, image_part,
)
from replayer.core.session.registry import Head, Importer, is_one_of, jsonl_confidence, mostly
from replayer.core.session.reader import JsonlStats, blob_size, iter_jsonl, json_args, ms_to_s, iso_to_s

FORMAT = "pi"

COMPACTION_PREFIX = ("The conversation history before this point was compacted into the "
                     "following summary:\n\n<summary>\n")
COMPACTION_SUFFIX = "\n</summary>"
BRANCH_PREFIX = "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n"
BRANCH_SUFFIX = "</summary>"
NO_RESULT_TEXT = "No result provided"
TARGET_API = "openai-completions"

_KNOWN_ENTRY_TYPES = {
    "message", "model_change", "thinking_level_change", "compaction", "branch_summary",
    "custom", "custom_message", "label", "session_info", "context_edit", "usage",
}


def _is_entry(o: dict[str, Any]) -> bool:
    """A v2/v3 entry: a known type, its own id and a parent link."""
    return is_one_of(o.get("type"), _KNOWN_ENTRY_TYPES) and isinstance(o.get("id"), str) and "parentId" in o


def _is_header(o: dict[str, Any]) -> bool:
    """The header line, its ``type`` or ``id`` damaged or not: no entry's type, header fields."""
    return o.get("type") == "session" or (not is_one_of(o.get("type"), _KNOWN_ENTRY_TYPES)
                                         and "version" in o and ("cwd" in o or "id" in o))


def detect(objs: list[dict[str, Any]]) -> bool:
    """A session header line; or, its ``type`` or ``id`` damaged (or the line lost), pi's entries."""
    if not objs:
        return False
    first = objs[0]
    if first.get("type") == "session" and isinstance(first.get("id"), str):
        return True
    entries = objs[1:] if _is_header(first) else objs
    return sum(map(_is_entry, entries)) >= (1 if entries is not objs else 2) and mostly(entries, _is_entry)


def _migrate(header: dict, entries: list[dict]) -> None:
    """v1 → v2 → v3 in memory: ids and parent links for v1, ``hookMessage`` → ``custom``."""
    version = header.get("version") or 1
    if version < 2:
        prev = None
        for i, e in enumerate(entries):
            e["id"] = f"v1-{i + 1}"  # index in the file with the header at 0
            e["parentId"] = prev
            prev = e["id"]
        for e in entries:
            if e.get("type") == "compaction" and "firstKeptEntryIndex" in e:
                idx = e["firstKeptEntryIndex"]
                e["firstKeptEntryId"] = f"v1-{idx}" if isinstance(idx, int) and idx >= 1 else None
    if version < 3:
        for e in entries:
            msg = e.get("message")
            if isinstance(msg, dict) and msg.get("role") == "hookMessage":
                msg["role"] = "custom"


def _content_parts(content: Any) -> list[Any]:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [c for c in content if isinstance(c, dict)]


def load(path: Path, *, images: str = "omit") -> Session:
    """pi's own steps (``buildSessionContext``): the active branch, its latest compaction, context
    edits, then entries → agent messages → the LLM messages of the next request.

    The parsed entries are let go before the messages are built, and each LLM message as it is
    converted (``_drained``): the entries' dicts and the messages' models held at once were a
    951 KB session's peak (4.1×, issue 24). What the end needs of them is kept apart first —
    plain reads, so nothing raises earlier than it did and salvage blames the same records."""
    header, entries, stats, warnings = _read(path)
    path_entries = _active_branch(entries, stats)
    provider, model, thinking = _model_of(header, path_entries)
    context, compaction_system, n_compacted = _after_compaction(path_entries, stats)
    agent, system_msgs = _agent_messages(context, compaction_system, n_compacted)
    infos = [e for e in entries if e.get("type") == "session_info"]  # a list: no Record in this frame's hand
    # only a branch with a compaction has earlier histories: otherwise its entries need not wait
    before = path_entries if any(e.get("type") == "compaction" for e in path_entries) else []
    del entries, path_entries, context
    stamps = [(m.get("role"), m.get("timestamp"), m.get("usage")) for m in agent]
    llm = _llm_messages(agent)
    del agent
    messages, stats.dropped_turns, stats.synthetic_results, compacted_prefix = _transform(
        _drained(llm), provider, model, images)
    system_prompt, tools = _fold_system(system_msgs)
    title = next((e.get("name") for e in reversed(infos)), None)
    times = [t for t in (ms_to_s(ts) for _, ts, _ in stamps if ts) if t]
    return Session(
        format=FORMAT, format_version=str(header.get("version") or 1), agent_version=None, path=str(path),
        session_id=header.get("id"), title=title, cwd=header.get("cwd"), provider=provider,
        model=model, thinking_level=thinking, created=iso_to_s(header.get("timestamp")),
        updated=max(times) if times else None, messages=messages, system_prompt=system_prompt,
        tools=tools, compacted_prefix=compacted_prefix, earlier=_earlier(header, before, images),
        usage=_last_usage(stamps), stats=stats, warnings=warnings,
    )


def _drained(items: list) -> Iterator:
    """``items`` in order, each let go of by the list as it is handed out."""
    items.reverse()
    while items:
        yield items.pop()


def _read(path: Path) -> tuple[dict, list[dict], ImportStats, list[str]]:
    """The header and the entries, migrated to the current version."""
    jstats = JsonlStats()
    objs = iter_jsonl(path, jstats)
    header = next(objs, None)
    if header is None:
        raise ImportFailed(f"{path} is not a pi session (no line is a JSON object)")
    entries: list[dict] = []
    note = None
    if header.get("type") != "session" or not isinstance(header.get("id"), str):
        header, entries, note = _damaged_header(path, header)
    entries += objs
    stats, warnings = jstats.import_stats(len(entries))
    warnings += [note] if note else []
    _migrate(header, entries)
    return header, entries, stats, warnings


def _damaged_header(path: Path, first: dict) -> tuple[dict, list[dict], str]:
    """A header whose ``type`` or ``id`` is damaged, read on with a note; or, when the first
    object is already an entry (the header line lost), version 3 from the entries' ids and that
    entry. Anything else is not a pi session, the field named."""
    if _is_header(first):
        bad = [f"its {k} is {str(first.get(k))[:40]!r}" for k, ok in
               (("type", first.get("type") == "session"), ("id", isinstance(first.get("id"), str))) if not ok]
        header = {k: v for k, v in first.items() if k != "id" or isinstance(v, str)}
        return header, [], f"the session header is damaged ({', '.join(bad)}): read as pi's all the same"
    if _is_entry(first):
        return {"version": 3}, [first], ("no session header (the first line that parsed is an entry): "
                                         "version 3 assumed, no cwd or session id")
    raise ImportFailed(f"{path} is not a pi session (the first record's \"type\" is "
                       f"{str(first.get('type'))[:40]!r}, not \"session\")")


def _active_branch(entries: list[dict], stats: ImportStats) -> list[dict]:
    """Steps B/C: the leaf is the last entry in file order; walk its parents to the root."""
    by_id: dict[str, dict] = {}
    for e in entries:
        if not is_one_of(e.get("type"), _KNOWN_ENTRY_TYPES):
            stats.count_unknown(e.get("type"))
        if isinstance(e.get("id"), str):
            by_id[e["id"]] = e
    stats.compactions_total = sum(1 for e in entries if e.get("type") == "compaction")
    path_entries = path_to_root(entries[-1] if entries else None, by_id, id_key="id", parent_key="parentId")
    stats.branch_length = len(path_entries)
    return path_entries


def _model_of(header: dict, path_entries: list[dict]) -> tuple[Any, Any, Any]:
    """(provider, model, thinking level) in force at the end of the branch."""
    provider, model, thinking = header.get("provider"), header.get("modelId"), header.get("thinkingLevel")
    for e in path_entries:
        if e.get("type") == "model_change":
            provider, model = e.get("provider", provider), e.get("modelId", model)
        elif e.get("type") == "thinking_level_change":
            thinking = e.get("thinkingLevel", thinking)
        elif e.get("type") == "message":
            m = e.get("message") or {}
            if m.get("role") == "assistant" and m.get("model"):
                provider, model = m.get("provider", provider), m["model"]
    return provider, model, thinking


def _after_compaction(path_entries: list[dict], stats: ImportStats) -> tuple[list[dict], Any, int]:
    """Step D: only the latest compaction counts: it, the entries it kept, and everything after it;
    and how many of those entries (it and the kept ones) come from before it."""
    comp_idx = max((i for i, e in enumerate(path_entries) if e.get("type") == "compaction"), default=-1)
    if comp_idx < 0:
        return path_entries, None, 0
    comp = path_entries[comp_idx]
    stats.compactions_applied = 1
    kept: list[dict] = []
    first_kept = comp.get("firstKeptEntryId")
    start = next((i for i, e in enumerate(path_entries[:comp_idx]) if e.get("id") == first_kept), None)
    if start is not None:
        kept = [e for e in path_entries[start:comp_idx] if e.get("type") != "compaction"]
    compaction_system = comp.get("systemMessage") or None
    if compaction_system:
        kept = [e for e in kept if not (e.get("type") == "message"
                                        and (e.get("message") or {}).get("role") == "system")]
    return [comp] + kept + path_entries[comp_idx + 1:], compaction_system, 1 + len(kept)


def _earlier(header: dict, path_entries: list[dict], images: str) -> list[EarlierHistory]:
    """The context pi sent from just before each compaction of the branch, oldest first: the
    same steps run on the entries up to that compaction (its own latest compaction applied).
    pi's session file keeps every entry, so each request sent before a compaction is rebuilt
    too; the summarization requests are not (pi's summarization prompt is its code, not the file's)."""
    out: list[EarlierHistory] = []
    for c in (i for i, e in enumerate(path_entries) if e.get("type") == "compaction"):
        provider, model, _ = _model_of(header, path_entries[:c])  # the model then in force
        context, compaction_system, n_compacted = _after_compaction(path_entries[:c], ImportStats())
        agent, system_msgs = _agent_messages(context, compaction_system, n_compacted)
        messages, _, _, prefix = _transform(_llm_messages(agent), provider, model, images)
        prompt, tools = _fold_system(system_msgs)
        if messages:
            out.append(EarlierHistory(messages=messages, system_prompt=prompt, tools=tools, compacted_prefix=prefix))
    return out


def _edited(m: dict, rep: Any) -> dict | None:
    """A message after its latest context edit (0.87+); None when the edit removes it."""
    if rep is None:
        return None
    if isinstance(rep, dict) and "content" in rep:
        c = rep["content"]
        if isinstance(c, str) and m.get("role") in ("assistant", "toolResult"):
            c = [{"type": "text", "text": c}]
        m["content"] = c
    return m


def _agent_messages(context: list[dict], compaction_system: Any, n_compacted: int = 0
                    ) -> tuple[list[dict], list[dict]]:
    """Step E: entries → agent messages, and the system messages set aside; the messages of
    the first ``n_compacted`` entries (the compaction and what it kept) are marked ``_compacted``."""
    edits = {e["targetId"]: e.get("replacement") for e in context
             if e.get("type") == "context_edit" and isinstance(e.get("targetId"), str)}
    agent: list[dict] = []
    system_msgs: list[dict] = []
    if compaction_system:
        system_msgs.append(compaction_system if isinstance(compaction_system, dict)
                           else {"content": compaction_system})
    for k, e in enumerate(context):
        t = e.get("type")
        ts = iso_to_s(e.get("timestamp"))
        n = len(agent)
        if t == "message":
            m = dict(e.get("message") or {})
            if e.get("id") in edits and (m := _edited(m, edits[e["id"]])) is None:
                continue
            (system_msgs if m.get("role") == "system" else agent).append(m)
        elif t == "custom_message":
            agent.append({"role": "custom", "content": e.get("content"), "timestamp": ts})
        elif t == "branch_summary" and e.get("summary"):
            agent.append({"role": "branchSummary", "summary": e["summary"], "timestamp": ts})
        elif t == "compaction":
            agent.append({"role": "compactionSummary", "summary": e.get("summary", ""), "timestamp": ts})
        if k < n_compacted:
            agent[n:] = [{**m, "_compacted": True} for m in agent[n:]]
    return agent, system_msgs


def _user_text(text: str, m: dict, origin: str) -> dict:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": m.get("timestamp"),
            "origin": origin, "_compacted": m.get("_compacted")}


def _llm_messages(agent: list[dict]) -> list[dict]:
    """Step F: agent messages → LLM messages (bash runs, custom messages and summaries become user turns)."""
    llm: list[dict] = []
    for m in agent:
        role = m.get("role")
        if role == "bashExecution":
            if not m.get("excludeFromContext"):
                llm.append(_user_text(_bash_text(m), m, "bash"))
        elif role == "custom":
            c = m.get("content")
            parts = [{"type": "text", "text": c}] if isinstance(c, str) else _content_parts(c)
            llm.append({"role": "user", "content": parts, "timestamp": m.get("timestamp"), "origin": "custom",
                        "_compacted": m.get("_compacted")})
        elif role == "branchSummary":
            llm.append(_user_text(BRANCH_PREFIX + m["summary"] + BRANCH_SUFFIX, m, "branch_summary"))
        elif role == "compactionSummary":
            llm.append(_user_text(COMPACTION_PREFIX + m["summary"] + COMPACTION_SUFFIX, m, "compaction_summary"))
        elif role in ("user", "assistant", "toolResult"):
            llm.append(m)
    return llm


def _last_usage(stamps: list[tuple[Any, Any, Any]]) -> Usage:
    """The last assistant message's usage, from the (role, timestamp, usage) of each agent message."""
    for role, _, u in reversed(stamps):
        if role == "assistant" and isinstance(u, dict):
            return Usage(input_tokens=u.get("input"), output_tokens=u.get("output"),
                         cache_read_tokens=u.get("cacheRead"),
                         context_tokens=(u.get("input") or 0) + (u.get("cacheRead") or 0) or None)
    return Usage()


def _bash_text(m: dict) -> str:
    text = f"Ran `{m.get('command', '')}`\n"
    out = m.get("output")
    text += f"```\n{out}\n```" if out else "(no output)"
    if m.get("cancelled"):
        text += "\n\n(command cancelled)"
    elif m.get("exitCode") not in (None, 0):
        text += f"\n\nCommand exited with code {m.get('exitCode')}"
    if m.get("truncated") and m.get("fullOutputPath"):
        text += f"\n\n[Output truncated. Full output: {m['fullOutputPath']}]"
    return text


def _normalize_call_id(cid: str) -> str:
    """pi-ai's openai-completions id normalisation for calls made by another model."""
    if "|" in cid:
        cid = cid.split("|", 1)[0]
    return re.sub(r"[^A-Za-z0-9_-]", "_", cid)[:40]


def _image_parts(parts: list[dict], images: str) -> list:
    """Text and image parts; consecutive omitted images collapse into one placeholder."""
    out: list = []
    for p in parts:
        if p.get("type") == "text":
            out.append(TextPart(text=p.get("text", "")))
        elif p.get("type") == "image":
            part = image_part(images, p.get("mimeType"), blob_size(p.get("data")))
            if isinstance(part, ImagePart) or not (out and out[-1] == part):
                out.append(part)
    return out


def _transform(llm: list[dict], provider: str | None, model: str | None, images: str
               ) -> tuple[list[Message], int, int, int]:
    """pi-ai transformMessages + the openai-completions adapter: (messages, dropped turns,
    synthetic results, how many of the messages come from the compaction's ``_compacted`` ones)."""
    t = _Transform(provider, model, images)
    compacted = 0
    for m in llm:
        if m.get("_compacted"):
            compacted = -1
        elif compacted < 0:
            compacted = len(t.out)
        role = m.get("role")
        if role == "assistant":
            t.assistant(m)
        elif role == "toolResult":
            t.tool_result(m)
        elif role == "user":
            t.user(m)
    t.flush_orphans()
    return t.out, t.dropped, t.synthetic, len(t.out) if compacted < 0 else compacted


class _Transform:
    def __init__(self, provider: str | None, model: str | None, images: str) -> None:
        self.provider, self.model, self.images = provider, model, images
        self.dropped = 0
        self.synthetic = 0
        self.out: list[Message] = []
        self.pending: dict[str, str] = {}  # tool call id → name, awaiting a result
        self.id_map: dict[str, str] = {}

    def flush_orphans(self) -> None:
        """A tool call left without a result gets pi's "No result provided" result."""
        for cid, name in self.pending.items():
            self.out.append(Message(role="tool", content=NO_RESULT_TEXT, tool_call_id=cid, name=name,
                                    origin="no_result"))
            self.synthetic += 1
        self.pending.clear()

    def assistant(self, m: dict) -> None:
        if m.get("stopReason") in ("error", "aborted"):
            self.dropped += 1
            return
        self.flush_orphans()
        same = m.get("provider") == self.provider and m.get("model") == self.model and m.get("api") == TARGET_API
        texts: list[str] = []
        thinking: list[str] = []
        signature: str | None = None
        calls: list[ToolCall] = []
        for b in _content_parts(m.get("content")):
            bt = b.get("type")
            if bt == "text":
                texts.append(b.get("text", ""))
            elif bt == "thinking" and not b.get("redacted"):
                th = b.get("thinking", "")
                if th.strip() and same:
                    thinking.append(th)
                    signature = signature or b.get("thinkingSignature")
                elif th.strip():
                    texts.append(th)  # cross-model: thinking becomes plain text
            elif bt == "toolCall":
                calls.append(self._call(b, same))
        content = "".join(t for t in texts if t.strip()) or None
        if content is None and not calls:
            return
        msg = Message(role="assistant", content=content, tool_calls=calls, timestamp=ms_to_s(m.get("timestamp")))
        if thinking and signature:
            msg.reasoning = "\n".join(thinking)
            msg.reasoning_field = signature if signature in ("reasoning_content", "reasoning", "reasoning_text") \
                else "reasoning_content"
        self.out.append(msg)
        for c in calls:
            self.pending[c.id] = c.name

    def _call(self, b: dict, same: bool) -> ToolCall:
        cid = str(b.get("id", ""))
        if not same:  # another provider's ids are normalised, and its results follow them
            self.id_map[cid] = cid = _normalize_call_id(cid)
        return ToolCall(id=cid, name=b.get("name", ""), arguments=json_args(b.get("arguments", {})))

    def tool_result(self, m: dict) -> None:
        ts = ms_to_s(m.get("timestamp"))
        cid = str(m.get("toolCallId", ""))
        cid = self.id_map.get(cid, cid)
        parts = _content_parts(m.get("content"))
        text = "\n".join(p.get("text", "") for p in parts if p.get("type") == "text")
        imgs = [p for p in parts if p.get("type") == "image"]
        if not text:
            text = "(see attached image)" if imgs else "(no tool output)"
        self.out.append(Message(role="tool", content=text, tool_call_id=cid, name=m.get("toolName"), timestamp=ts))
        self.pending.pop(cid, None)
        if imgs and self.images == "keep":
            self.out.append(Message(role="user", content=[TextPart(text="Attached image(s) from tool result:")]
                                    + _image_parts(imgs, "keep"), timestamp=ts, origin="tool_image"))

    def user(self, m: dict) -> None:
        self.flush_orphans()
        ts = ms_to_s(m.get("timestamp"))
        c = m.get("content")
        if isinstance(c, str):
            self.out.append(Message(role="user", content=c, timestamp=ts, origin=m.get("origin")))
        elif parts := _image_parts(_content_parts(c), self.images):
            self.out.append(Message(role="user", content=parts, timestamp=ts, origin=m.get("origin")))


def _fold_system(system_msgs: list[dict]) -> tuple[str | None, list[dict] | None]:
    """0.86+: fold persisted system messages into one prompt and replay tool adds/removes."""
    if not system_msgs:
        return None, None
    contents: list[str] = []
    sections: dict[str, str | None] = {}
    tools: dict[str, dict] = {}
    for m in system_msgs:
        c = m.get("content")
        if isinstance(c, list):
            c = "\n".join(p.get("text", "") for p in c if isinstance(p, dict))
        if c:
            contents.append(c)
        for k, v in (m.get("sections") or {}).items():
            sections[k] = v
        for t in m.get("toolsAdded") or []:
            if isinstance(t, dict) and t.get("name"):
                tools[t["name"]] = t
        for t in m.get("toolsRemoved") or []:
            if isinstance(t, dict):
                tools.pop(t.get("name"), None)
    pieces = contents + [v for v in sections.values() if v]
    prompt = "\n\n".join(pieces) if pieces else None
    tool_list = [
        {"type": "function", "function": {"name": t["name"], "description": t.get("description", ""),
                                          "parameters": t.get("parameters", {"type": "object", "properties": {}})}}
        for t in tools.values()
    ]
    return prompt, tool_list or None


def detect_head(head: Head) -> float:
    # a session header line; also the last resort for a one-line file that is whole JSON
    c = jsonl_confidence(head, detect, 0.92)
    return c or (0.3 if head.objs and detect(head.objs) else 0.0)


IMPORTER = Importer(FORMAT, detect_head, lambda path, o: load(path, images=o.images))
