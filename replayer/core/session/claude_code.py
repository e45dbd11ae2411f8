"""Claude Code transcripts (``~/.claude/projects/<cwd>/<id>.jsonl``) → chat messages.

The active thread is the ``parentUuid`` chain from the newest main-chain record; a
``compact_boundary`` has no parent, so the walk stops there and the ``isCompactSummary``
user message that follows carries the history. Assistant responses are written one
content block per line and are merged back by ``message.id`` — all records of that id,
also those off the walked chain (2.x writes parallel ``tool_use`` blocks and their
``tool_result`` records on sibling branches); every result of a turn's calls follows it,
in file order, as Claude Code sends them on resume. Sidechains (Task subagents) are
excluded. Claude Code stores neither system prompt nor tool schemas.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from replayer.core.errors import ImportFailed
from replayer.core.session.model import (
    ImagePart, Message, Session, TextPart, ToolCall, Usage,
)
from replayer.core.session.reader import blob_size, iso_to_s, json_args, read_records
from replayer.core.session.registry import Head, Importer, is_one_of, jsonl_confidence

FORMAT = "claude-code"
CONVERSATIONAL = {"user", "assistant", "system", "attachment"}
KNOWN = CONVERSATIONAL | {
    "summary", "file-history-snapshot", "queue-operation", "last-prompt", "cost-state",
    "atis-latch", "custom-title", "tag", "agent-name", "pr-link", "progress", "hive-mind-meta",
}


def detect(objs: list[dict[str, Any]]) -> bool:
    hits = 0
    for o in objs:
        if o.get("_type") == "hive-mind-meta":
            hits += 1
        elif "sessionId" in o and ("uuid" in o or "parentUuid" in o) and is_one_of(o.get("type"), KNOWN):
            hits += 1
        elif is_one_of(o.get("type"), ("summary", "file-history-snapshot", "queue-operation")) and (
                "leafUuid" in o or "messageId" in o or "operation" in o):
            hits += 1
    return hits > 0 and any("sessionId" in o or "uuid" in o for o in objs)


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


def load(path: Path, *, images: str = "omit") -> Session:
    records, stats, warnings = read_records(path, "Claude Code")
    by_uuid: dict[str, dict] = {}
    for r in records:
        t = r.get("type") or r.get("_type")
        if t not in KNOWN:
            stats.unknown_types[str(t)] = stats.unknown_types.get(str(t), 0) + 1
        if isinstance(r.get("uuid"), str):
            by_uuid[r["uuid"]] = r
        if r.get("isSidechain"):
            stats.sidechain_records += 1
        if r.get("type") == "system" and r.get("subtype") == "compact_boundary":
            stats.compactions_total += 1

    main = [r for r in records if r.get("type") in CONVERSATIONAL and not r.get("isSidechain")
            and isinstance(r.get("uuid"), str)]
    if not main:
        # an agent file holds only a sidechain: replay that thread
        main = [r for r in records if r.get("type") in CONVERSATIONAL and isinstance(r.get("uuid"), str)]
        if not main:
            raise ImportFailed(f"{path} has no conversation records")
        warnings.append("only sidechain (subagent) records: replaying the subagent thread")
    leaf = main[-1]
    chain: list[dict] = []
    seen: set[str] = set()
    node: dict | None = leaf
    while node is not None and node["uuid"] not in seen:
        seen.add(node["uuid"])
        chain.append(node)
        pid = node.get("parentUuid")
        node = by_uuid.get(pid) if isinstance(pid, str) else None
    chain.reverse()
    stats.branch_length = len(chain)
    if chain and chain[0].get("type") == "system" and chain[0].get("subtype") == "compact_boundary":
        stats.compactions_applied = 1

    # Claude Code 2.x writes each content block of a response as its own record and hangs each
    # tool_result off the record of its own tool_use: parallel calls and their results sit on
    # sibling branches the parentUuid walk does not visit. Claude Code sends them all on resume
    # (the API refuses a tool_use without its result), so the whole message.id and every result
    # of its calls are gathered from the thread's records.
    on_chain = {r["uuid"] for r in chain}
    order = {r["uuid"]: k for k, r in enumerate(main)}
    group_of: dict[str, list[dict]] = {}  # record uuid → all records of its API response
    last_group: dict[str, list[dict]] = {}
    results_of: dict[str, list[dict]] = {}
    for r in main:
        msg = r.get("message") or {}
        if r.get("type") == "assistant" and isinstance(msg.get("id"), str):
            g = last_group.get(msg["id"])
            if g is None or _new_response(g, r):
                g = last_group[msg["id"]] = []
            g.append(r)
            group_of[r["uuid"]] = g
        elif r.get("type") == "user" and isinstance(msg.get("content"), list):
            for b in msg["content"]:
                if isinstance(b, dict) and b.get("type") == "tool_result":
                    lst = results_of.setdefault(str(b.get("tool_use_id", "")), [])
                    if not lst or lst[-1] is not r:
                        lst.append(r)

    messages: list[Message] = []
    model = None
    version = None
    usage = Usage()
    done_groups: set[int] = set()
    consumed: set[str] = set()  # result records already placed after their calls
    i = 0
    while i < len(chain):
        r = chain[i]
        t = r.get("type")
        version = r.get("version") or version
        ts = iso_to_s(r.get("timestamp"))
        if t == "assistant":
            i += 1
            if r["uuid"] in group_of:
                group = group_of[r["uuid"]]
                if id(group) in done_groups:
                    continue  # a block of a response already merged
                done_groups.add(id(group))
            else:  # re-exports without message.id: consecutive assistant records are one turn
                group = [r]
                while i < len(chain) and chain[i].get("type") == "assistant" and not (chain[i].get("message") or {}).get("id"):
                    group.append(chain[i])
                    i += 1
            stats.recovered_tool_calls += sum(1 for g in group if g["uuid"] not in on_chain
                                              for b in _blocks(g) if b.get("type") == "tool_use")
            if r.get("isApiErrorMessage"):
                stats.dropped_turns += 1
                continue
            msg = _assistant(group, ts)
            m = (r.get("message") or {}).get("model")
            if m and m != "<synthetic>":
                model = m
            u = (group[-1].get("message") or {}).get("usage")
            if isinstance(u, dict):
                ctx = sum(int(u.get(k) or 0) for k in ("input_tokens", "cache_read_input_tokens",
                                                         "cache_creation_input_tokens"))
                usage = Usage(input_tokens=u.get("input_tokens"), output_tokens=u.get("output_tokens"),
                              cache_read_tokens=u.get("cache_read_input_tokens"), context_tokens=ctx or None)
            if msg is None:
                continue
            messages.append(msg)
            # every result of this turn's calls, in the order the file holds them
            holders: list[dict] = []
            for tc in msg.tool_calls:
                for h in results_of.get(tc.id, []):
                    if h["uuid"] not in consumed and all(h is not x for x in holders):
                        holders.append(h)
            holders.sort(key=lambda h: order[h["uuid"]])
            for h in holders:
                consumed.add(h["uuid"])
                if h["uuid"] not in on_chain:
                    stats.recovered_tool_results += sum(1 for b in _blocks(h) if b.get("type") == "tool_result")
                messages.extend(_user(h, iso_to_s(h.get("timestamp")), images))
            continue
        i += 1
        if t == "user":
            if r.get("isVisibleInTranscriptOnly") or r["uuid"] in consumed:
                continue
            messages.extend(_user(r, ts, images))
        elif t == "attachment":
            rendered = (r.get("attachment") or {}).get("rendered") or []
            text = "\n".join(x.get("content", "") for x in rendered if isinstance(x, dict) and x.get("content"))
            if text:
                messages.append(Message(role="user", content=text, timestamp=ts, origin="attachment"))

    session_id = next((r.get("sessionId") for r in chain if r.get("sessionId")), None)
    cwd = next((r.get("cwd") for r in reversed(chain) if r.get("cwd")), None)
    title = next((r.get("summary") for r in records if r.get("type") == "summary"
                  and r.get("leafUuid") in by_uuid), None)
    times = [iso_to_s(r.get("timestamp")) for r in chain]
    times = [t for t in times if t]
    return Session(
        format=FORMAT, agent_version=version, path=str(path), session_id=session_id, title=title,
        cwd=cwd, provider="anthropic", model=model, created=min(times) if times else None,
        updated=max(times) if times else None, messages=messages, system_prompt=None, tools=None,
        usage=usage, stats=stats, warnings=warnings,
    )


def _new_response(group: list[dict], r: dict) -> bool:
    """Whether ``r`` starts another API response than ``group`` although it carries the same
    ``message.id`` (proxies and fake providers reuse ids): another ``requestId``, or a block
    index (2.1.x ``apiBlockIndex``) the response already had."""
    req = r.get("requestId")
    if req and any(g.get("requestId") and g.get("requestId") != req for g in group):
        return True
    k = r.get("apiBlockIndex")
    return isinstance(k, int) and any(isinstance(g.get("apiBlockIndex"), int) and g["apiBlockIndex"] >= k
                                      for g in group)


def _blocks(r: dict) -> list[dict]:
    content = (r.get("message") or {}).get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def _assistant(group: list[dict], ts: float | None) -> Message | None:
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[ToolCall] = []
    for r in group:
        content = (r.get("message") or {}).get("content")
        if isinstance(content, str):
            texts.append(content)
            continue
        for b in content or []:
            if not isinstance(b, dict):
                continue
            bt = b.get("type")
            if bt == "text":
                texts.append(b.get("text", ""))
            elif bt == "thinking" and b.get("thinking"):
                thinking.append(b["thinking"])
            elif bt == "tool_use":
                calls.append(ToolCall(id=str(b.get("id", "")), name=b.get("name", ""),
                                      arguments=json_args(b.get("input", {}))))
    content = "\n\n".join(t for t in texts if t.strip()) or None
    if content is None and not calls and not thinking:
        return None
    return Message(role="assistant", content=content, reasoning="\n".join(thinking) or None,
                   tool_calls=calls, timestamp=ts)


def _user(r: dict, ts: float | None, images: str) -> list[Message]:
    content = (r.get("message") or {}).get("content")
    origin = "compact_summary" if r.get("isCompactSummary") else ("meta" if r.get("isMeta") else None)
    if isinstance(content, str):
        return [Message(role="user", content=content, timestamp=ts, origin=origin)]
    out: list[Message] = []
    parts: list = []
    for b in content or []:
        if not isinstance(b, dict):
            continue
        bt = b.get("type")
        if bt == "tool_result":
            inner = b.get("content")
            text = _text_of(inner)
            if b.get("is_error") and not text:
                text = "(tool error)"
            out.append(Message(role="tool", content=text, tool_call_id=str(b.get("tool_use_id", "")),
                               timestamp=ts))
            if isinstance(inner, list):
                imgs = [x for x in inner if isinstance(x, dict) and x.get("type") == "image"]
                if imgs and images == "keep":
                    parts.extend(ImagePart(mime=(x.get("source") or {}).get("media_type", "image/png"),
                                           byte_size=blob_size((x.get("source") or {}).get("data")))
                                 for x in imgs)
        elif bt == "text":
            parts.append(TextPart(text=b.get("text", "")))
        elif bt in ("image", "document"):
            src = b.get("source") or {}
            if images == "keep" and bt == "image":
                parts.append(ImagePart(mime=src.get("media_type", "image/png"), byte_size=blob_size(src.get("data"))))
            else:
                parts.append(TextPart(text=f"({bt} omitted: model does not support {bt}s)"))
    if parts:
        out.append(Message(role="user", content=parts, timestamp=ts, origin=origin))
    return out


def detect_head(head: Head) -> float:
    return jsonl_confidence(head, detect, 0.9)


IMPORTER = Importer(FORMAT, detect_head, lambda path, o: load(path, images=o.images))
