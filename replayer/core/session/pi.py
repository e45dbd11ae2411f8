"""pi coding agent sessions (v1, v2, v3) → the messages pi sends on ``--resume``.

Follows pi's own resume path (``spec/session-formats.md`` §1.4): migrate v1/v2 in memory,
take the leaf as the last entry in file order, walk ``parentId`` to the root, apply the
latest compaction, turn entries into agent messages, then pi-ai's provider-independent
transform and its openai-completions adapter (what llama-server receives).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from replayer.core.errors import ImportFailed
from replayer.core.session.model import (
    IMAGE_OMITTED, ImagePart, Message, Session, TextPart, ToolCall, Usage,
)
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


def detect(objs: list[dict[str, Any]]) -> bool:
    if not objs:
        return False
    first = objs[0]
    return first.get("type") == "session" and isinstance(first.get("id"), str)


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
    jstats = JsonlStats()
    objs = iter_jsonl(path, jstats)
    header = next(objs, None)
    if header is None or header.get("type") != "session" or not isinstance(header.get("id"), str):
        raise ImportFailed(f"{path} is not a pi session (first line is not a session header)")
    entries: list[dict] = list(objs)
    stats, warnings = jstats.import_stats(len(entries))
    version = header.get("version") or 1
    _migrate(header, entries)

    by_id: dict[str, dict] = {}
    for e in entries:
        t = e.get("type")
        if t not in _KNOWN_ENTRY_TYPES:
            stats.unknown_types[str(t)] = stats.unknown_types.get(str(t), 0) + 1
        if isinstance(e.get("id"), str):
            by_id[e["id"]] = e
    stats.compactions_total = sum(1 for e in entries if e.get("type") == "compaction")

    # Step B/C: leaf = last entry in file order; walk to the root
    path_entries: list[dict] = []
    seen: set[str] = set()
    node = entries[-1] if entries else None
    while node is not None and node.get("id") not in seen:
        seen.add(node.get("id"))
        path_entries.append(node)
        pid = node.get("parentId")
        node = by_id.get(pid) if isinstance(pid, str) else None
    path_entries.reverse()
    stats.branch_length = len(path_entries)

    provider = header.get("provider")
    model = header.get("modelId")
    thinking = header.get("thinkingLevel")
    for e in path_entries:
        if e.get("type") == "model_change":
            provider, model = e.get("provider", provider), e.get("modelId", model)
        elif e.get("type") == "thinking_level_change":
            thinking = e.get("thinkingLevel", thinking)
        elif e.get("type") == "message":
            m = e.get("message") or {}
            if m.get("role") == "assistant" and m.get("model"):
                provider, model = m.get("provider", provider), m["model"]

    # Step D: only the latest compaction counts
    context: list[dict] = path_entries
    comp_idx = max((i for i, e in enumerate(path_entries) if e.get("type") == "compaction"), default=-1)
    compaction_system: dict | None = None
    if comp_idx >= 0:
        comp = path_entries[comp_idx]
        stats.compactions_applied = 1
        kept: list[dict] = []
        first_kept = comp.get("firstKeptEntryId")
        start = next((i for i, e in enumerate(path_entries[:comp_idx]) if e.get("id") == first_kept), None)
        if start is not None:
            kept = [e for e in path_entries[start:comp_idx] if e.get("type") != "compaction"]
        if comp.get("systemMessage"):
            compaction_system = comp["systemMessage"]
            kept = [e for e in kept if not (e.get("type") == "message"
                                            and (e.get("message") or {}).get("role") == "system")]
        context = [comp] + kept + path_entries[comp_idx + 1:]

    # context_edit (0.87+): latest edit per target wins
    edits: dict[str, Any] = {}
    for e in context:
        if e.get("type") == "context_edit" and isinstance(e.get("targetId"), str):
            edits[e["targetId"]] = e.get("replacement")

    # Step E/F: entries → agent messages → LLM messages
    agent: list[dict] = []
    system_msgs: list[dict] = []
    if compaction_system:
        system_msgs.append(compaction_system if isinstance(compaction_system, dict)
                           else {"content": compaction_system})
    for e in context:
        t = e.get("type")
        ts = iso_to_s(e.get("timestamp"))
        if t == "message":
            m = dict(e.get("message") or {})
            if e.get("id") in edits:
                rep = edits[e["id"]]
                if rep is None:
                    continue
                if isinstance(rep, dict) and "content" in rep:
                    c = rep["content"]
                    if isinstance(c, str) and m.get("role") in ("assistant", "toolResult"):
                        c = [{"type": "text", "text": c}]
                    m["content"] = c
            if m.get("role") == "system":
                system_msgs.append(m)
                continue
            agent.append(m)
        elif t == "custom_message":
            agent.append({"role": "custom", "content": e.get("content"), "timestamp": ts})
        elif t == "branch_summary" and e.get("summary"):
            agent.append({"role": "branchSummary", "summary": e["summary"], "timestamp": ts})
        elif t == "compaction":
            agent.append({"role": "compactionSummary", "summary": e.get("summary", ""), "timestamp": ts})

    llm: list[dict] = []
    for m in agent:
        role = m.get("role")
        if role == "bashExecution":
            if m.get("excludeFromContext"):
                continue
            llm.append({"role": "user", "content": [{"type": "text", "text": _bash_text(m)}],
                        "timestamp": m.get("timestamp"), "origin": "bash"})
        elif role == "custom":
            c = m.get("content")
            parts = [{"type": "text", "text": c}] if isinstance(c, str) else _content_parts(c)
            llm.append({"role": "user", "content": parts, "timestamp": m.get("timestamp"),
                        "origin": "custom"})
        elif role == "branchSummary":
            llm.append({"role": "user", "content": [{"type": "text", "text": BRANCH_PREFIX + m["summary"] + BRANCH_SUFFIX}],
                        "timestamp": m.get("timestamp"), "origin": "branch_summary"})
        elif role == "compactionSummary":
            llm.append({"role": "user", "content": [{"type": "text", "text": COMPACTION_PREFIX + m["summary"] + COMPACTION_SUFFIX}],
                        "timestamp": m.get("timestamp"), "origin": "compaction_summary"})
        elif role in ("user", "assistant", "toolResult"):
            llm.append(m)

    messages, dropped, synthetic = _transform(llm, provider, model, images)
    stats.dropped_turns = dropped
    stats.synthetic_results = synthetic

    system_prompt, tools = _fold_system(system_msgs)
    usage = Usage()
    for m in reversed(agent):
        if m.get("role") == "assistant" and isinstance(m.get("usage"), dict):
            u = m["usage"]
            usage = Usage(input_tokens=u.get("input"), output_tokens=u.get("output"),
                          cache_read_tokens=u.get("cacheRead"),
                          context_tokens=(u.get("input") or 0) + (u.get("cacheRead") or 0) or None)
            break
    title = next((e.get("name") for e in reversed(entries) if e.get("type") == "session_info"), None)
    times = [ms_to_s(m.get("timestamp")) for m in agent if m.get("timestamp")]
    times = [t for t in times if t]
    return Session(
        format=FORMAT, format_version=str(version), agent_version=None, path=str(path),
        session_id=header.get("id"), title=title, cwd=header.get("cwd"), provider=provider,
        model=model, thinking_level=thinking, created=iso_to_s(header.get("timestamp")),
        updated=max(times) if times else None, messages=messages, system_prompt=system_prompt,
        tools=tools, usage=usage, stats=stats, warnings=warnings,
    )


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


def _image_parts(parts: list[dict], images: str, placeholder: str) -> list:
    """Text and image parts; consecutive omitted images collapse into one placeholder."""
    out: list = []
    for p in parts:
        if p.get("type") == "text":
            out.append(TextPart(text=p.get("text", "")))
        elif p.get("type") == "image":
            if images == "keep":
                out.append(ImagePart(mime=p.get("mimeType", "image/png"), byte_size=blob_size(p.get("data"))))
            elif not (out and isinstance(out[-1], TextPart) and out[-1].text == placeholder):
                out.append(TextPart(text=placeholder))
    return out


def _transform(llm: list[dict], provider: str | None, model: str | None, images: str
               ) -> tuple[list[Message], int, int]:
    """pi-ai transformMessages + the openai-completions adapter."""
    dropped = 0
    synthetic = 0
    out: list[Message] = []
    pending: dict[str, str] = {}  # tool call id → name, awaiting a result
    id_map: dict[str, str] = {}

    def flush_orphans() -> None:
        nonlocal synthetic
        for cid in list(pending):
            out.append(Message(role="tool", content=NO_RESULT_TEXT, tool_call_id=cid,
                               name=pending[cid], origin="no_result"))
            synthetic += 1
        pending.clear()

    for m in llm:
        role = m.get("role")
        ts = ms_to_s(m.get("timestamp"))
        if role == "assistant":
            if m.get("stopReason") in ("error", "aborted"):
                dropped += 1
                continue
            flush_orphans()
            same = (m.get("provider") == provider and m.get("model") == model
                    and m.get("api") == TARGET_API)
            texts: list[str] = []
            thinking: list[str] = []
            signature: str | None = None
            calls: list[ToolCall] = []
            for b in _content_parts(m.get("content")):
                bt = b.get("type")
                if bt == "text":
                    texts.append(b.get("text", ""))
                elif bt == "thinking":
                    if b.get("redacted"):
                        continue
                    th = b.get("thinking", "")
                    if same:
                        if th.strip():
                            thinking.append(th)
                            signature = signature or b.get("thinkingSignature")
                    elif th.strip():
                        texts.append(th)  # cross-model: thinking becomes plain text
                elif bt == "toolCall":
                    cid = str(b.get("id", ""))
                    if not same:
                        new = _normalize_call_id(cid)
                        id_map[cid] = new
                        cid = new
                    calls.append(ToolCall(id=cid, name=b.get("name", ""), arguments=json_args(b.get("arguments", {}))))
            content = "".join(t for t in texts if t.strip()) or None
            if content is None and not calls:
                continue
            msg = Message(role="assistant", content=content, tool_calls=calls, timestamp=ts)
            if thinking and signature:
                msg.reasoning = "\n".join(thinking)
                msg.reasoning_field = signature if signature in ("reasoning_content", "reasoning", "reasoning_text") \
                    else "reasoning_content"
            out.append(msg)
            for c in calls:
                pending[c.id] = c.name
        elif role == "toolResult":
            cid = str(m.get("toolCallId", ""))
            cid = id_map.get(cid, cid)
            parts = _content_parts(m.get("content"))
            text = "\n".join(p.get("text", "") for p in parts if p.get("type") == "text")
            has_image = any(p.get("type") == "image" for p in parts)
            if not text:
                text = "(see attached image)" if has_image else "(no tool output)"
            out.append(Message(role="tool", content=text, tool_call_id=cid, name=m.get("toolName"),
                               timestamp=ts))
            pending.pop(cid, None)
            if has_image:
                imgs = [p for p in parts if p.get("type") == "image"]
                if images == "keep":
                    out.append(Message(role="user", content=[TextPart(text="Attached image(s) from tool result:")]
                                       + _image_parts(imgs, "keep", ""), timestamp=ts, origin="tool_image"))
        elif role == "user":
            flush_orphans()
            c = m.get("content")
            if isinstance(c, str):
                out.append(Message(role="user", content=c, timestamp=ts, origin=m.get("origin")))
            else:
                parts = _image_parts(_content_parts(c), images, IMAGE_OMITTED)
                if parts:
                    out.append(Message(role="user", content=parts, timestamp=ts, origin=m.get("origin")))
    flush_orphans()
    return out, dropped, synthetic


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
